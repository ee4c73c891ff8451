//! Redis with Sentinel under the gateway: a master, one replica and three sentinels on
//! loopback, the gateway on `redis+sentinel://`. Steady MCP traffic (an OAuth token in an MCP
//! session, so every call reads redis) runs while the master is killed (SIGKILL); the sentinels
//! promote the replica, the gateway asks them for the new master, calls fail for at most the
//! failover time and then succeed, and the static token, the OAuth grant (refresh included) and
//! the MCP session created before the failover are all still valid.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::{
    process::Command,
    sync::{
        Arc, Mutex,
        atomic::{AtomicBool, Ordering},
    },
    time::{Duration, Instant},
};

use pforte_tests::{
    Budget, Limits, RedisServer, Sentinels, Stack, eventually,
    oauth::{
        Browser, CLAUDE_CALLBACK, Pkce, authorize_url, browser_step, discover, exchange_code,
        mcp_status, param, refresh, register_like_claude,
    },
};
use reqwest::StatusCode;
use serde_json::json;

const USER: &str = "alice";
const PASSWORD: &str = "correct horse battery staple";
const REDIS_PASSWORD: &str = "sentinel-test-pw";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_gateway_follows_a_sentinel_failover_and_keeps_tokens_grants_and_sessions() {
    let Some(master) = RedisServer::options()
        .append_only()
        .password(REDIS_PASSWORD)
        .start()
    else {
        return;
    };
    let replica = RedisServer::options()
        .append_only()
        .password(REDIS_PASSWORD)
        .replica_of(master.port)
        .start()
        .expect("replica");
    let mut master = master;
    let Some(sentinels) = Sentinels::start(master.port, "pforte", Some(REDIS_PASSWORD), 3) else {
        return;
    };
    let ready = eventually(Duration::from_secs(30), || async { sentinels.ready(1) }).await;
    assert!(ready, "the sentinels never saw each other and the replica");

    let gw = Stack::builder()
        .redis_url(&sentinels.url())
        .limits(Limits::default().mcp(Budget::new(100_000, 60, 100_000)))
        .start()
        .await;
    let http = gw.http();
    let t0 = Instant::now();
    let stamp = |what: &str| eprintln!("[{:>6} ms] {what}", t0.elapsed().as_millis());

    // A static token, an OAuth grant and an MCP session, all in redis through the sentinels.
    let static_token = gw.create_token("ops").await.unwrap();
    gw.add_user(USER, PASSWORD).unwrap();
    let browser = Browser::for_gateway(&gw);
    let d = discover(&browser.http, &gw.mcp_url()).await.unwrap();
    let client = register_like_claude(&browser.http, &d).await.unwrap();
    let pkce = Pkce::new("failover");
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
    let mut mcp = gw.mcp(&access).client_name("failover-test");
    mcp.open().await.expect("initialize");
    let session = mcp.session().unwrap().to_owned();
    assert_eq!(mcp.request("ping", json!({})).await.status(), 200);
    // Replication is asynchronous: what redis acknowledged to one replica survives a failover.
    let acked = Command::new("redis-cli")
        .args(["-p", &master.port.to_string(), "--no-auth-warning"])
        .args(["-a", REDIS_PASSWORD, "WAIT", "1", "5000"])
        .output()
        .unwrap();
    assert_eq!(String::from_utf8_lossy(&acked.stdout).trim(), "1");
    stamp("static token, OAuth grant and MCP session created; replica in sync");

    // Steady traffic: pings in the session with the OAuth token, each one logged with its time.
    let stop = Arc::new(AtomicBool::new(false));
    let log: Arc<Mutex<Vec<(Instant, bool)>>> = Arc::default();
    let mut load = Vec::new();
    for _ in 0..4 {
        let (mcp, stop, log) = (mcp.clone(), stop.clone(), log.clone());
        load.push(tokio::spawn(async move {
            for _ in 0..100_000 {
                if stop.load(Ordering::Relaxed) {
                    break;
                }
                let ok =
                    tokio::time::timeout(Duration::from_secs(5), mcp.request("ping", json!({})))
                        .await
                        .is_ok_and(|r| r.status() == StatusCode::OK);
                log.lock().unwrap().push((Instant::now(), ok));
                if !ok {
                    tokio::time::sleep(Duration::from_millis(20)).await;
                }
            }
        }));
    }
    let served_before = eventually(Duration::from_secs(5), || async {
        log.lock().unwrap().len() >= 50
    })
    .await;
    assert!(served_before, "the traffic never got going");

    // The time is taken before the kill: `kill9` waits for the process, and calls that fail
    // while it does are after the kill, not before.
    let killed = Instant::now();
    master.kill9();
    stamp("master killed (SIGKILL)");
    let promoted = eventually(Duration::from_secs(30), || async {
        sentinels.master_port(0) == Some(replica.port)
    })
    .await;
    assert!(promoted, "the sentinels never promoted the replica");
    stamp("the sentinels promoted the replica");
    // Calls succeed again: 50 in a row after the kill.
    let recovered = eventually(Duration::from_secs(30), || async {
        let log = log.lock().unwrap();
        let after: Vec<bool> = log
            .iter()
            .filter(|(at, _)| *at > killed)
            .map(|&(_, ok)| ok)
            .collect();
        after.len() >= 50 && after[after.len() - 50..].iter().all(|ok| *ok)
    })
    .await;
    assert!(recovered, "calls did not succeed again after the failover");
    stamp("calls succeed again");
    stop.store(true, Ordering::Relaxed);
    for l in load {
        l.await.unwrap();
    }

    let log = std::mem::take(&mut *log.lock().unwrap());
    let failed: Vec<Instant> = log.iter().filter(|e| !e.1).map(|e| e.0).collect();
    let (served, failed_count) = (log.len() - failed.len(), failed.len());
    let last_failure = failed.iter().max().copied();
    let without_service = last_failure.map_or(Duration::ZERO, |at| at.duration_since(killed));
    eprintln!(
        "sentinel failover: {served} calls served, {failed_count} failed; \
         time without service {} ms after the kill (down-after 1000 ms)",
        without_service.as_millis()
    );
    assert!(
        failed.iter().all(|at| *at > killed),
        "calls failed before the master was killed"
    );
    assert!(
        without_service < Duration::from_secs(15),
        "calls failed for {without_service:?} after the kill"
    );

    // Everything created before the failover is still valid on the new master.
    let works = |token: String| {
        let (http, url) = (http.clone(), gw.mcp_url());
        async move {
            let status = http
                .get(&url)
                .bearer_auth(&token)
                .send()
                .await
                .unwrap()
                .status();
            status != StatusCode::UNAUTHORIZED
        }
    };
    assert!(works(static_token).await, "the static token was lost");
    assert_ne!(
        mcp_status(&http, &gw.mcp_url(), &access).await,
        StatusCode::UNAUTHORIZED,
        "the OAuth access token was lost"
    );
    let refreshed = refresh(&http, &d, &client, &tok.refresh().unwrap())
        .await
        .expect("the OAuth grant's refresh token was lost");
    assert!(works(refreshed.access().unwrap()).await);
    let in_session = mcp.clone().in_session(Some(&session));
    assert_eq!(
        in_session.request("ping", json!({})).await.status(),
        StatusCode::OK,
        "the MCP session was lost"
    );
}
