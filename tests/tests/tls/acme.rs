//! Certificates from a real ACME CA (pebble, challenges validated for real against the
//! gateway's ports): obtained by tls-alpn-01 and by http-01, a client trusting pebble's root
//! completes an MCP `initialize` by SNI, a renewal with no failed request, the CA down at
//! renewal time, two gateways on one redis making one order, and the clear 503 before the
//! first certificate. Each test prints the figures of its run (orders, challenge, time to the
//! first certificate).

use std::{
    net::SocketAddr,
    time::{Duration, Instant},
};

use pforte_tests::{McpClient, RedisServer, eventually};

use crate::{
    Served,
    pebble::{Pebble, PebbleOptions},
    port, served_leaf, service,
};

const HOST: &str = "mcp.pforte.test";

fn acme_toml(pebble: &Pebble, challenge: &str, http_listen: Option<u16>) -> String {
    let mut text = format!(
        "public_url = \"https://{HOST}\"\n[tls.acme]\ndomains = [\"{HOST}\"]\nemail = \"ops@pforte.test\"\ndirectory = \"{}\"\nca_file = \"{}\"\nchallenge = \"{challenge}\"\n",
        pebble.directory,
        pebble.https_ca.display()
    );
    if let Some(p) = http_listen {
        text.push_str(&format!("http_listen = \"127.0.0.1:{p}\"\n"));
    }
    text
}

/// The config text must put top-level keys before tables: `Served` writes `listen` and
/// `data_dir` first, then this text, then `[upstream]`.
fn client_for(root: &str, addr: SocketAddr) -> reqwest::Client {
    let cert = reqwest::Certificate::from_pem(root.as_bytes()).unwrap();
    reqwest::Client::builder()
        .tls_certs_only([cert])
        .resolve(HOST, addr)
        .pool_max_idle_per_host(0)
        .timeout(Duration::from_secs(10))
        .build()
        .unwrap()
}

fn base(addr: SocketAddr) -> String {
    format!("https://{HOST}:{}", addr.port())
}

/// Waits until a client trusting pebble's root gets `/healthz` 200; returns how long it took.
async fn until_certified(
    client: &reqwest::Client,
    addr: SocketAddr,
    limit: Duration,
) -> Option<Duration> {
    let started = Instant::now();
    let url = format!("{}/healthz", base(addr));
    eventually(limit, || {
        let client = client.clone();
        let url = url.clone();
        async move {
            client
                .get(&url)
                .send()
                .await
                .is_ok_and(|r| r.status() == 200)
        }
    })
    .await
    .then(|| started.elapsed())
}

fn orders(log: &str) -> usize {
    log.matches("acme order created").count()
}

/// `pforte token create` against the gateway's config; the running gateway picks it up.
fn token(gw: &Served) -> String {
    let out = std::process::Command::new(pforte_tests::bin("pforte"))
        .args(["token", "create", "acme-test", "--config"])
        .arg(gw.dir.path().join("pforte.toml"))
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap().trim().to_owned()
}

async fn initialize_ok(client: &reqwest::Client, addr: SocketAddr, token: &str) -> bool {
    let url = format!("{}/mcp", base(addr));
    eventually(Duration::from_secs(10), || {
        let mut mcp = McpClient::new(client.clone(), &url).bearer(token);
        async move { mcp.try_initialize().await.is_ok_and(|r| r.status() == 200) }
    })
    .await
}

async fn metric(client: &reqwest::Client, addr: SocketAddr, name: &str) -> Option<f64> {
    // /metrics answers loopback peers on the public listener.
    let text = client
        .get(format!("{}/metrics", base(addr)))
        .send()
        .await
        .ok()?
        .text()
        .await
        .ok()?;
    text.lines()
        .find(|l| l.starts_with(name))
        .and_then(|l| l.rsplit(' ').next())
        .and_then(|v| v.parse().ok())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tls_alpn_01_obtains_a_certificate_and_a_client_completes_initialize() {
    let gw_port = port();
    let Some(pebble) = Pebble::start(PebbleOptions {
        tls_port: gw_port,
        http_port: port(),
        validity_secs: 3600,
    })
    .await
    else {
        return;
    };
    let svc = service();
    let started = Instant::now();
    let gw = Served::spawn(
        tempfile::tempdir().unwrap(),
        gw_port,
        &acme_toml(&pebble, "tls-alpn-01", None),
        &svc.url(),
    );
    let client = client_for(&pebble.root().await, gw.addr);
    let took = until_certified(&client, gw.addr, Duration::from_secs(60)).await;
    assert!(
        took.is_some(),
        "no certificate:\n{}\n--- pebble:\n{}",
        gw.log(),
        pebble.log()
    );
    let first = started.elapsed();
    assert!(initialize_ok(&client, gw.addr, &token(&gw)).await);
    let log = gw.log();
    assert_eq!(orders(&log), 1, "{log}");
    println!(
        "pebble run: challenge tls-alpn-01, orders {}, first certificate {} ms after start",
        orders(&log),
        first.as_millis()
    );
    // The account and certificate are kept owner-only in the data dir.
    let acme_dir = gw.dir.path().join("data/acme");
    for entry in std::fs::read_dir(&acme_dir).unwrap() {
        let path = entry.unwrap().path();
        use std::os::unix::fs::PermissionsExt as _;
        let mode = std::fs::metadata(&path).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o600, "{}", path.display());
    }
    assert_eq!(
        metric(&client, gw.addr, "pforte_tls_renewals_total").await,
        Some(1.0)
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn http_01_obtains_a_certificate_and_plain_http_redirects_to_https() {
    let gw_port = port();
    let http_port = port();
    let Some(pebble) = Pebble::start(PebbleOptions {
        tls_port: port(),
        http_port,
        validity_secs: 3600,
    })
    .await
    else {
        return;
    };
    let svc = service();
    let started = Instant::now();
    let gw = Served::spawn(
        tempfile::tempdir().unwrap(),
        gw_port,
        &acme_toml(&pebble, "http-01", Some(http_port)),
        &svc.url(),
    );
    let client = client_for(&pebble.root().await, gw.addr);
    assert!(
        until_certified(&client, gw.addr, Duration::from_secs(60))
            .await
            .is_some(),
        "no certificate:\n{}\n--- pebble:\n{}",
        gw.log(),
        pebble.log()
    );
    let first = started.elapsed();
    assert!(initialize_ok(&client, gw.addr, &token(&gw)).await);
    let log = gw.log();
    println!(
        "pebble run: challenge http-01, orders {}, first certificate {} ms after start",
        orders(&log),
        first.as_millis()
    );
    assert_eq!(orders(&log), 1, "{log}");
    let plain = reqwest::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .build()
        .unwrap();
    let r = plain
        .get(format!("http://127.0.0.1:{http_port}/mcp?x=1"))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 308);
    assert_eq!(r.headers()["location"], format!("https://{HOST}/mcp?x=1"));
    let r = plain
        .get(format!(
            "http://127.0.0.1:{http_port}/.well-known/acme-challenge/none"
        ))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 404);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_renewal_replaces_the_certificate_without_a_failed_request_and_a_ca_outage_keeps_it() {
    let gw_port = port();
    // 30 s certificates: renewal is due 20 s after issue.
    let Some(mut pebble) = Pebble::start(PebbleOptions {
        tls_port: gw_port,
        http_port: port(),
        validity_secs: 30,
    })
    .await
    else {
        return;
    };
    let svc = service();
    let gw = Served::spawn(
        tempfile::tempdir().unwrap(),
        gw_port,
        &acme_toml(&pebble, "tls-alpn-01", None),
        &svc.url(),
    );
    let client = client_for(&pebble.root().await, gw.addr);
    assert!(
        until_certified(&client, gw.addr, Duration::from_secs(60))
            .await
            .is_some(),
        "{}",
        gw.log()
    );
    let first = served_leaf(gw.addr, HOST).await.unwrap();
    // Requests on new connections all through the renewal: none may fail.
    let mut sent = 0u32;
    let deadline = Instant::now() + Duration::from_secs(60);
    let renewed = loop {
        let r = client
            .get(format!("{}/healthz", base(gw.addr)))
            .send()
            .await;
        sent += 1;
        assert!(
            r.as_ref().is_ok_and(|r| r.status() == 200),
            "request {sent} failed during the renewal: {r:?}\n{}",
            gw.log()
        );
        let leaf = served_leaf(gw.addr, HOST).await.unwrap();
        if leaf != first {
            break leaf;
        }
        assert!(Instant::now() < deadline, "never renewed:\n{}", gw.log());
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    println!(
        "renewal: {sent} requests during it, none failed; orders {}",
        orders(&gw.log())
    );

    // The CA goes down: the next renewal fails, is counted, and the renewed certificate stays.
    pebble.stop();
    let failed = eventually(Duration::from_secs(60), || async {
        metric(&client, gw.addr, "pforte_tls_renewal_failures_total")
            .await
            .is_some_and(|n| n >= 1.0)
    })
    .await;
    assert!(failed, "no failure counted:\n{}", gw.log());
    assert_eq!(served_leaf(gw.addr, HOST).await.unwrap(), renewed);
    assert!(
        gw.log()
            .contains("acme order failed; the current certificate stays served")
    );
    // Still ready: a valid certificate is served, the CA's outage is not the gateway's.
    let ready = client
        .get(format!("{}/readyz", base(gw.addr)))
        .send()
        .await
        .unwrap();
    assert_eq!(ready.status(), 200);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_gateways_on_one_redis_make_one_order() {
    let Some(redis) = RedisServer::start() else {
        return;
    };
    let (a_port, b_port) = (port(), port());
    // pebble validates on gateway a's port; whichever gateway holds the lock orders, the other
    // answers the challenge it publishes.
    let Some(pebble) = Pebble::start(PebbleOptions {
        tls_port: a_port,
        http_port: port(),
        validity_secs: 3600,
    })
    .await
    else {
        return;
    };
    let svc = service();
    let text = format!(
        "redis_url = \"{}\"\n{}",
        redis.url(),
        acme_toml(&pebble, "tls-alpn-01", None)
    );
    let a = Served::spawn(tempfile::tempdir().unwrap(), a_port, &text, &svc.url());
    let b = Served::spawn(tempfile::tempdir().unwrap(), b_port, &text, &svc.url());
    let root = pebble.root().await;
    for gw in [&a, &b] {
        assert!(
            until_certified(
                &client_for(&root, gw.addr),
                gw.addr,
                Duration::from_secs(60)
            )
            .await
            .is_some(),
            "a: {}\n--- b: {}\n--- pebble: {}",
            a.log(),
            b.log(),
            pebble.log()
        );
    }
    assert_eq!(
        served_leaf(a.addr, HOST).await.unwrap(),
        served_leaf(b.addr, HOST).await.unwrap()
    );
    let total = orders(&a.log()) + orders(&b.log());
    // Either may win the lock: when b orders, a (where pebble validates) answers the challenge
    // b published.
    let who = if orders(&a.log()) > 0 {
        "a, validated on itself"
    } else {
        "b, validated on a"
    };
    println!("two gateways on one redis: {total} order(s), made by {who}");
    assert_eq!(total, 1, "a: {}\n--- b: {}", a.log(), b.log());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn before_the_first_certificate_requests_get_a_clear_503() {
    // A CA that never answers: the gateway waits for its first certificate.
    let dead = port();
    let svc = service();
    let dir = tempfile::tempdir().unwrap();
    let ca = dir.path().join("ca.pem");
    let ck = rcgen::generate_simple_self_signed(vec!["127.0.0.1".to_owned()]).unwrap();
    std::fs::write(&ca, ck.cert.pem()).unwrap();
    let text = format!(
        "public_url = \"https://{HOST}\"\n[tls.acme]\ndirectory = \"https://127.0.0.1:{dead}/dir\"\nca_file = \"{}\"\n",
        ca.display()
    );
    let gw = Served::spawn(dir, port(), &text, &svc.url());
    let insecure = reqwest::Client::builder()
        .danger_accept_invalid_certs(true)
        .resolve(HOST, gw.addr)
        .build()
        .unwrap();
    let url = format!("{}/mcp", base(gw.addr));
    let answered = eventually(Duration::from_secs(20), || {
        let insecure = insecure.clone();
        let url = url.clone();
        async move {
            match insecure.post(&url).send().await {
                Ok(r) => {
                    r.status() == 503
                        && r.text()
                            .await
                            .is_ok_and(|t| t.contains("obtaining the TLS certificate"))
                }
                Err(_) => false,
            }
        }
    })
    .await;
    assert!(answered, "{}", gw.log());
    assert!(gw.log().contains("acme order failed"), "{}", gw.log());
}

/// Whether the gateway closes `stream` (EOF or reset) within `limit`, reading what it sends.
async fn closed_within(stream: &mut tokio::net::TcpStream, limit: Duration) -> bool {
    use tokio::io::AsyncReadExt as _;
    let mut buf = [0u8; 4096];
    let deadline = Instant::now() + limit;
    for _ in 0..64 {
        let left = deadline.saturating_duration_since(Instant::now());
        match tokio::time::timeout(left, stream.read(&mut buf)).await {
            Ok(Ok(0) | Err(_)) => return true,
            Ok(Ok(_)) => {}
            Err(_) => return false,
        }
    }
    false
}

/// The plain http-01 listener has the main listener's bounds (red team 2026-12-04 M3): a
/// connection over `max_connections_per_ip` is closed at once, and silent, half-sent and
/// kept-alive connections are closed after `keepalive_timeout_secs`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_http_01_listener_caps_connections_per_ip_and_closes_idle_ones() {
    use tokio::{io::AsyncWriteExt as _, net::TcpStream};
    // A CA that never answers: the plain listener serves while the gateway waits.
    let dead = port();
    let http_port = port();
    let svc = service();
    let dir = tempfile::tempdir().unwrap();
    let ca = dir.path().join("ca.pem");
    let ck = rcgen::generate_simple_self_signed(vec!["127.0.0.1".to_owned()]).unwrap();
    std::fs::write(&ca, ck.cert.pem()).unwrap();
    let text = format!(
        "keepalive_timeout_secs = 2\nmax_connections_per_ip = 3\npublic_url = \"https://{HOST}\"\n[tls.acme]\ndirectory = \"https://127.0.0.1:{dead}/dir\"\nca_file = \"{}\"\nchallenge = \"http-01\"\nhttp_listen = \"127.0.0.1:{http_port}\"\n",
        ca.display()
    );
    let gw = Served::spawn(dir, port(), &text, &svc.url());
    let plain = format!("127.0.0.1:{http_port}");
    let up = eventually(Duration::from_secs(20), || {
        let plain = plain.clone();
        async move { TcpStream::connect(&plain).await.is_ok() }
    })
    .await;
    assert!(up, "{}", gw.log());

    let mut held = Vec::new();
    for _ in 0..3 {
        held.push(TcpStream::connect(&plain).await.unwrap());
    }
    let mut over = TcpStream::connect(&plain).await.unwrap();
    assert!(
        closed_within(&mut over, Duration::from_millis(1500)).await,
        "the fourth connection from one IP (the probe's may hold a slot too) is closed at once"
    );
    for (i, silent) in held.iter_mut().enumerate() {
        assert!(
            closed_within(silent, Duration::from_secs(10)).await,
            "silent connection {i} still open"
        );
    }

    let mut half = TcpStream::connect(&plain).await.unwrap();
    half.write_all(b"GET /x HTTP/1.1\r\nHost: a\r\n")
        .await
        .unwrap();
    assert!(closed_within(&mut half, Duration::from_secs(10)).await);

    let mut kept = TcpStream::connect(&plain).await.unwrap();
    kept.write_all(b"GET /mcp HTTP/1.1\r\nHost: a\r\n\r\n")
        .await
        .unwrap();
    assert!(closed_within(&mut kept, Duration::from_secs(10)).await);
}
