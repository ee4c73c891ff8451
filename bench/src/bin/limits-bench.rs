//! Benchmark for rate limiting: limiter decisions per second (in-process and redis) and gateway
//! throughput with limits off, in-process and on redis — measured side by side in one run.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::{
    sync::Arc,
    time::{Duration, Instant},
};

use pforte::for_tests::{Limiter, LocalLimiter, Policy, RedisLimiter};
use pforte_clock::SystemClock;
use pforte_tests::{Budget, Gateway, Limits, McpService, RedisServer, Stack};

const BIG: Policy = Policy {
    rate: 1_000_000_000,
    period_secs: 1,
    burst: 1_000_000_000,
};

async fn decisions_per_sec(limiter: Arc<dyn Limiter>, total: usize, concurrency: usize) -> f64 {
    let started = Instant::now();
    let mut tasks = Vec::new();
    for t in 0..concurrency {
        let limiter = limiter.clone();
        tasks.push(tokio::spawn(async move {
            for i in 0..total / concurrency {
                let key = format!("bench:{}", (i * concurrency + t) % 1000);
                limiter.check(&key, BIG).await.unwrap();
            }
        }));
    }
    for t in tasks {
        t.await.unwrap();
    }
    total as f64 / started.elapsed().as_secs_f64()
}

/// Requests per second through the gateway's /mcp path (auth, limit, proxy, upstream answer).
async fn gateway_rps(gw: &Gateway, token: &str, total: usize, concurrency: usize) -> (f64, f64) {
    let http = gw.http();
    let started = Instant::now();
    let mut tasks = Vec::new();
    for _ in 0..concurrency {
        let (http, url, token) = (http.clone(), gw.mcp_url(), token.to_owned());
        tasks.push(tokio::spawn(async move {
            let mut lat = Vec::new();
            for _ in 0..total / concurrency {
                let t = Instant::now();
                let resp = http.get(&url).bearer_auth(&token).send().await.unwrap();
                let status = resp.status();
                if status == 429 {
                    panic!("429: {}", resp.text().await.unwrap_or_default());
                }
                lat.push(t.elapsed());
            }
            lat
        }));
    }
    let mut lat = Vec::new();
    for t in tasks {
        lat.extend(t.await.unwrap());
    }
    lat.sort();
    let p50 = lat[lat.len() / 2].as_secs_f64() * 1000.0;
    (total as f64 / started.elapsed().as_secs_f64(), p50)
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let deadline = Instant::now() + Duration::from_secs(240);
    println!("limiter decisions (1000 keys):");
    let local = decisions_per_sec(
        Arc::new(LocalLimiter::new(Arc::new(SystemClock))),
        1_000_000,
        4,
    )
    .await;
    println!("  in-process   {local:>12.0} decisions/s");
    let redis = RedisServer::start().expect("redis-server is needed for this benchmark");
    let shared = decisions_per_sec(
        Arc::new(RedisLimiter::connect(&redis.url(), "bench:")?),
        40_000,
        32,
    )
    .await;
    println!(
        "  redis        {shared:>12.0} decisions/s   (ratio in-process/redis {:.1}x)",
        local / shared
    );

    let svc = McpService::start(&[])?;
    let unreached = Limits::default().mcp(Budget::new(1_000_000_000, 1, 1_000_000_000));
    let modes = [
        ("limits off", None, Limits::off()),
        ("in-process", None, unreached.clone()),
        ("redis", Some(redis.url()), unreached),
    ];
    let mut rows = Vec::new();
    for (name, redis_url, limits) in modes {
        let mut stack = Stack::builder()
            .upstream(&svc.url())
            .plain_http()
            .limits(limits);
        if let Some(url) = &redis_url {
            stack = stack.redis_url(url);
        }
        eprintln!("mode {name}");
        let gw = stack.try_start().await?;
        let token = gw.create_token("bench").await?;
        gateway_rps(&gw, &token, 400, 8).await; // warm-up
        let (rps, p50) = gateway_rps(&gw, &token, 4000, 16).await;
        rows.push((name, rps, p50));
        assert!(Instant::now() < deadline, "benchmark over its time budget");
    }
    let base = rows[0].1;
    println!(
        "gateway GET /mcp through auth + limits + proxy (4000 requests, 16 concurrent, plain http):"
    );
    println!(
        "  {:<12} {:>10} {:>10} {:>8}",
        "mode", "req/s", "p50 ms", "ratio"
    );
    for (name, rps, p50) in rows {
        println!("  {name:<12} {rps:>10.0} {p50:>10.2} {:>8.2}", rps / base);
    }
    Ok(())
}
