//! Several gateways on one redis: tokens, clients, revocations and rate limits are shared; and a
//! redis outage under load: static tokens keep working, OAuth fails closed with 503, limits
//! fall back to the process, and everything recovers once redis is back — with nothing lost
//! (AOF).
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::{
    process::Command,
    sync::{
        Arc,
        atomic::{AtomicBool, AtomicU64, Ordering},
    },
    time::{Duration, Instant},
};

use pforte_tests::{
    Budget, Gateway, Limits, McpService, OAuth, RedisServer, Stack, StackBuilder, Throttle,
    eventually, http_client,
    oauth::{
        Browser, CLAUDE_CALLBACK, Pkce, authorize_url, browser_step, discover, exchange_code,
        mcp_status, param, refresh, register_like_claude, revoke,
    },
};
use reqwest::StatusCode;

const USER: &str = "alice";
const PASSWORD: &str = "correct horse battery staple";

/// Two gateways in front of `svc` behind one public URL, sharing `redis`, each configured by
/// `configure` as well.
async fn pair(
    redis: &RedisServer,
    svc: &McpService,
    configure: impl Fn(StackBuilder) -> StackBuilder,
) -> (Stack, Stack) {
    let gateway = || {
        configure(
            Stack::builder()
                .upstream(&svc.url())
                .redis_url(&redis.url()),
        )
    };
    let gw_a = gateway().start().await;
    // B serves the same public URL as A: in production both sit behind one load balancer.
    let gw_b = gateway().public_url(&gw_a.base).start().await;
    (gw_a, gw_b)
}

/// A client of gateway B (its own certificate) that speaks to B's port.
fn client_for(gw: &Gateway) -> reqwest::Client {
    gw.http()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_gateways_share_tokens_clients_revocations_and_limits() {
    let Some(redis) = RedisServer::start() else {
        return;
    };
    let svc = McpService::start(&[]).unwrap();
    let limits = Limits::default().mcp(Budget::new(200, 60, 200));
    let (a, b) = pair(&redis, &svc, |s| s.limits(limits.clone())).await;
    let (http_a, http_b) = (client_for(&a), client_for(&b));

    // A static token created through A's configuration works on B.
    let out = Command::new(pforte_tests::bin("pforte"))
        .args(["token", "create", "shared", "--config"])
        .arg(a.config_path())
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let static_token = String::from_utf8(out.stdout).unwrap().trim().to_owned();
    let works_on_b = eventually(Duration::from_secs(2), || {
        let req = http_b.get(b.mcp_url()).bearer_auth(&static_token).send();
        async move { req.await.is_ok_and(|r| r.status() != 401) }
    })
    .await;
    assert!(works_on_b, "a static token created for A never worked on B");

    // OAuth: registered, authorized and issued on A; used and refreshed on B.
    a.add_user(USER, PASSWORD).unwrap();
    let browser = Browser::for_gateway(&a);
    let d = discover(&browser.http, &a.mcp_url()).await.unwrap();
    let client = register_like_claude(&browser.http, &d).await.unwrap();
    let pkce = Pkce::new("two-gateways");
    let auth = authorize_url(
        &d,
        &client.client_id,
        CLAUDE_CALLBACK,
        &pkce,
        "s1",
        &[("resource", &d.resource)],
    )
    .unwrap();
    let (cb, _) = browser_step(&browser, &auth, USER, PASSWORD, "approve")
        .await
        .unwrap();
    let code = param(&cb, "code").unwrap();
    let tok = exchange_code(
        &http_a,
        &d,
        &client,
        &code,
        CLAUDE_CALLBACK,
        &pkce.verifier,
        &d.resource,
    )
    .await
    .unwrap();
    let access = tok.access().unwrap();
    assert_ne!(
        mcp_status(&http_b, &b.mcp_url(), &access).await,
        StatusCode::UNAUTHORIZED
    );
    // The client registered on A refreshes on B (B's token endpoint, same store).
    let d_b = {
        let mut d_b = d.clone();
        d_b.as_meta["token_endpoint"] = format!("{}/token", b.base).into();
        d_b.as_meta["revocation_endpoint"] = format!("{}/revoke", b.base).into();
        d_b
    };
    let refreshed = refresh(&http_b, &d_b, &client, &tok.refresh().unwrap())
        .await
        .unwrap();
    let access2 = refreshed.access().unwrap();
    assert_ne!(
        mcp_status(&http_a, &a.mcp_url(), &access2).await,
        StatusCode::UNAUTHORIZED
    );

    // Revoked on A, refused on B within a second.
    revoke(&http_a, &d, &client, &access2, "access_token")
        .await
        .unwrap();
    let revoked_at = Instant::now();
    let refused = eventually(Duration::from_secs(1), || async {
        mcp_status(&http_b, &b.mcp_url(), &access2).await == StatusCode::UNAUTHORIZED
    })
    .await;
    assert!(
        refused,
        "B still accepted a token revoked on A after {:?}",
        revoked_at.elapsed()
    );

    // One budget across both: 200 per minute (burst 200) for this principal, under load.
    let out = Command::new(pforte_tests::bin("pforte"))
        .args(["token", "create", "load", "--config"])
        .arg(a.config_path())
        .output()
        .unwrap();
    let load_token = String::from_utf8(out.stdout).unwrap().trim().to_owned();
    // Both gateways must know the token before the load starts (each probe spends one request).
    let mut probes = 0;
    for (gw, http) in [(&a, &http_a), (&b, &http_b)] {
        let known = eventually(Duration::from_secs(2), || {
            let req = http.get(gw.mcp_url()).bearer_auth(&load_token).send();
            async move { req.await.is_ok_and(|r| r.status() != 401) }
        })
        .await;
        assert!(known, "a gateway never learned the new token");
        probes += 1;
    }
    let allowed = Arc::new(AtomicU64::new(probes));
    let unauthenticated = Arc::new(AtomicU64::new(0));
    let started = Instant::now();
    let mut workers = Vec::new();
    for w in 0..8 {
        let (gw_url, http) = if w % 2 == 0 {
            (a.mcp_url(), http_a.clone())
        } else {
            (b.mcp_url(), http_b.clone())
        };
        let (token, allowed, unauthenticated) =
            (load_token.clone(), allowed.clone(), unauthenticated.clone());
        workers.push(tokio::spawn(async move {
            for _ in 0..60 {
                let status = http
                    .get(&gw_url)
                    .bearer_auth(&token)
                    .send()
                    .await
                    .unwrap()
                    .status();
                let counter = match status {
                    StatusCode::TOO_MANY_REQUESTS => continue,
                    StatusCode::UNAUTHORIZED => &unauthenticated,
                    _ => &allowed,
                };
                counter.fetch_add(1, Ordering::Relaxed);
            }
        }));
    }
    for w in workers {
        w.await.unwrap();
    }
    let elapsed = started.elapsed();
    assert_eq!(
        unauthenticated.load(Ordering::Relaxed),
        0,
        "the token was refused as unknown"
    );
    let allowed = allowed.load(Ordering::Relaxed) as f64;
    // GCRA's budget over the run: the burst plus what the rate refilled meanwhile (300 ms each).
    let budget = 200.0 + (elapsed.as_millis() as f64 / 300.0).floor();
    eprintln!("shared limit: {allowed} allowed of 482 sent in {elapsed:?}; budget {budget}");
    assert!(
        (allowed - budget).abs() <= budget * 0.02,
        "allowed {allowed}, budget {budget}"
    );
}

/// The authorization server's throttles are the gateways' one limiter: failed sign-ins on A
/// count against the same client IP on B, which refuses the next attempt with the throttle
/// page (429) instead of checking the password against a budget of its own.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn failed_logins_on_one_gateway_throttle_the_ip_on_the_other() {
    let Some(redis) = RedisServer::start() else {
        return;
    };
    let svc = McpService::start(&[]).unwrap();
    let throttle = OAuth::default().login_per_ip(Throttle::new(3, 1));
    let (a, b) = pair(&redis, &svc, |stack| stack.oauth(throttle.clone())).await;
    a.add_user(USER, PASSWORD).unwrap();
    let browser_a = Browser::for_gateway(&a);
    let d = discover(&browser_a.http, &a.mcp_url()).await.unwrap();
    let client = register_like_claude(&browser_a.http, &d).await.unwrap();
    let pkce = Pkce::new("shared-throttle");
    let on_a = authorize_url(&d, &client.client_id, CLAUDE_CALLBACK, &pkce, "s", &[]).unwrap();
    let mut on_b = on_a.clone();
    let b_port = url::Url::parse(&b.base).unwrap().port();
    on_b.set_port(b_port).unwrap();

    // One wrong password through `browser` at `url`: the status of the login form's answer.
    let wrong_login = async |browser: &Browser, url: &url::Url| {
        let page = browser.get(url).await.unwrap();
        assert_eq!(page.status, 200, "{}", page.body);
        let mut login = page.form().unwrap();
        login.set("username", USER).unwrap();
        login.set("password", "not the password").unwrap();
        browser.submit(&login, None).await.unwrap()
    };
    for attempt in 0..3 {
        let page = wrong_login(&browser_a, &on_a).await;
        assert_eq!(page.status, 401, "attempt {attempt} on A: {}", page.body);
    }
    let browser_b = Browser::for_gateway(&b);
    let page = wrong_login(&browser_b, &on_b).await;
    assert_eq!(
        page.status, 429,
        "B did not count A's failures: {}",
        page.body
    );
    assert!(page.body.contains("Too many failed sign-in attempts"));
    assert!(page.header("retry-after").is_some());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_outage_under_load() {
    // With AOF (fsync always), to kill -9 and start again on the same port and dir.
    let Some(mut redis) = RedisServer::options().append_only().start() else {
        return;
    };
    let gw = Stack::builder()
        .redis_url(&redis.url())
        .limits(Limits::default().mcp(Budget::new(100_000, 60, 100_000)))
        .start()
        .await;
    let http = gw.http();
    let t0 = Instant::now();
    let stamp = |what: &str| eprintln!("[{:>6} ms] {what}", t0.elapsed().as_millis());

    let out = Command::new(pforte_tests::bin("pforte"))
        .args(["token", "create", "ops", "--config"])
        .arg(gw.config_path())
        .output()
        .unwrap();
    let static_token = String::from_utf8(out.stdout).unwrap().trim().to_owned();
    assert!(
        eventually(Duration::from_secs(2), || {
            let req = http.get(gw.mcp_url()).bearer_auth(&static_token).send();
            async move { req.await.is_ok_and(|r| r.status() != 401) }
        })
        .await
    );

    gw.add_user(USER, PASSWORD).unwrap();
    let browser = Browser::for_gateway(&gw);
    let d = discover(&browser.http, &gw.mcp_url()).await.unwrap();
    let client = register_like_claude(&browser.http, &d).await.unwrap();
    let pkce = Pkce::new("outage");
    let auth = authorize_url(&d, &client.client_id, CLAUDE_CALLBACK, &pkce, "s", &[]).unwrap();
    let (cb, _) = browser_step(&browser, &auth, USER, PASSWORD, "approve")
        .await
        .unwrap();
    let code = param(&cb, "code").unwrap();
    let tok = exchange_code(
        &http,
        &d,
        &client,
        &code,
        CLAUDE_CALLBACK,
        &pkce.verifier,
        &d.resource,
    )
    .await
    .unwrap();
    let access = tok.access().unwrap();
    assert_ne!(
        mcp_status(&http, &gw.mcp_url(), &access).await,
        StatusCode::UNAUTHORIZED
    );
    stamp("static and OAuth tokens work");

    // Bounded load of static-token requests for the whole outage.
    let stop = Arc::new(AtomicBool::new(false));
    let (ok, errors) = (Arc::new(AtomicU64::new(0)), Arc::new(AtomicU64::new(0)));
    let mut load = Vec::new();
    for _ in 0..4 {
        let (http, url, token) = (http.clone(), gw.mcp_url(), static_token.clone());
        let (stop, ok, errors) = (stop.clone(), ok.clone(), errors.clone());
        load.push(tokio::spawn(async move {
            for _ in 0..20_000 {
                if stop.load(Ordering::Relaxed) {
                    break;
                }
                match http.get(&url).bearer_auth(&token).send().await {
                    Ok(r)
                        if r.status() == 401
                            || r.status() == 429
                            || r.status().is_server_error() =>
                    {
                        errors.fetch_add(1, Ordering::Relaxed)
                    }
                    Ok(_) => ok.fetch_add(1, Ordering::Relaxed),
                    Err(_) => errors.fetch_add(1, Ordering::Relaxed),
                };
            }
        }));
    }

    redis.kill9();
    stamp("redis killed (SIGKILL)");
    // Past the validator's 1 s cache, a new OAuth validation fails closed.
    // (A GET: a POST initialize would already get 503 from the session count in redis.)
    let closed = eventually(Duration::from_secs(5), || async {
        http.get(gw.mcp_url())
            .bearer_auth(&access)
            .send()
            .await
            .is_ok_and(|r| r.status() == StatusCode::SERVICE_UNAVAILABLE)
    })
    .await;
    assert!(
        closed,
        "OAuth validation did not answer 503 while redis was down"
    );
    let resp = http
        .get(gw.mcp_url())
        .bearer_auth(&access)
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 503);
    assert!(resp.headers().contains_key("retry-after"));
    stamp("OAuth answers 503 with Retry-After");
    let metrics_url = format!("{}/metrics", gw.base);
    let metrics = http
        .get(&metrics_url)
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    assert!(metrics.contains("pforte_ratelimit_degraded 1"), "{metrics}");
    stamp("the metric says limits are per process");
    let token_endpoint = http
        .post(d.endpoint("token_endpoint").unwrap())
        .form(&[
            ("grant_type", "refresh_token"),
            ("refresh_token", &tok.refresh().unwrap()),
            ("client_id", &client.client_id),
            (
                "client_secret",
                client.client_secret.as_deref().unwrap_or_default(),
            ),
        ])
        .send()
        .await
        .unwrap();
    assert_eq!(token_endpoint.status(), 503);
    stamp("the token endpoint answers 503");

    redis.restart();
    let restarted = Instant::now();
    stamp("redis restarted from its AOF");
    let recovered = eventually(Duration::from_secs(2), || async {
        mcp_status(&http, &gw.mcp_url(), &access).await != StatusCode::SERVICE_UNAVAILABLE
    })
    .await;
    let took = restarted.elapsed();
    assert!(
        recovered,
        "OAuth did not recover within 2 s of redis returning"
    );
    assert_ne!(
        mcp_status(&http, &gw.mcp_url(), &access).await,
        StatusCode::UNAUTHORIZED,
        "the OAuth token was lost across the redis restart"
    );
    stamp(&format!(
        "OAuth recovered {} ms after the restart; the token survived",
        took.as_millis()
    ));

    stop.store(true, Ordering::Relaxed);
    for l in load {
        l.await.unwrap();
    }
    let (ok, errors) = (ok.load(Ordering::Relaxed), errors.load(Ordering::Relaxed));
    stamp(&format!("static-token load: {ok} ok, {errors} errors"));
    assert!(ok > 0);
    assert_eq!(errors, 0, "static-token requests failed during the outage");
    drop(http_client(None));
}
