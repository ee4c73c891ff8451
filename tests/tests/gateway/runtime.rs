//! The proxy's runtime arrangements end to end: `per-core` (the default: one single-threaded
//! proxy service per thread, all on one `SO_REUSEPORT` port) and `work-stealing` (one shared
//! runtime) both serve many connections with one set of sessions and rate limits between their
//! threads; and no second gateway can join a per-core gateway's port.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::time::Duration;

use pforte_tests::{Budget, Limits, Stack};
use serde_json::json;

/// Twenty callers, each on a connection of its own (the kernel spreads them over the threads),
/// use one session opened on another connection: every thread knows the session, and the
/// person's budget (a burst of 12, no refill within the test) is spent once across all of them:
/// exactly as many calls pass as the budget had left, whichever threads served them.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn both_runtimes_share_sessions_and_limits_between_threads() {
    for runtime in ["per-core", "work-stealing"] {
        let gw = Stack::builder()
            .plain_http()
            .runtime(runtime)
            .limits(Limits::default().mcp(Budget::new(1, 3600, 12)))
            .start()
            .await;
        let token = gw.create_token("laptop").await.unwrap();
        let mut opener = gw.mcp(&token);
        opener.open().await.expect("session opened");
        let session = opener.session().expect("a session id").to_owned();
        let first = opener.call_tool("whoami", json!({})).await;
        assert_eq!(first.status(), 200, "{runtime}");
        // `"mcp";r=LEFT;t=…`: what the budget has left after the opener's requests.
        let left: usize = first.headers()["ratelimit"]
            .to_str()
            .unwrap()
            .split(';')
            .find_map(|p| p.strip_prefix("r="))
            .and_then(|r| r.parse().ok())
            .expect("a remaining count");
        assert!((5..12).contains(&left), "{runtime}: {left} left");
        let calls = (0..20).map(|_| {
            let caller = gw.mcp(&token).in_session(Some(&session));
            async move {
                caller
                    .call_tool("whoami", json!({}))
                    .await
                    .status()
                    .as_u16()
            }
        });
        let (mut passed, mut refused) = (0, 0);
        for status in futures::future::join_all(calls).await {
            match status {
                200 => passed += 1,
                429 => refused += 1,
                other => panic!("{runtime}: a call answered {other}"),
            }
        }
        assert_eq!((passed, refused), (left, 20 - left), "{runtime}");
    }
}

/// A second `pforte serve` on the port a per-core gateway holds is refused with one line,
/// not let in beside it (its sockets use `SO_REUSEPORT`; the start-up probe does not).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_second_gateway_cannot_join_a_per_core_port() {
    let gw = Stack::builder().plain_http().start().await;
    let addr = gw.base.trim_start_matches("http://").to_owned();
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("pforte.toml");
    std::fs::write(
        &config,
        format!(
            "listen = {addr:?}\ndata_dir = {:?}\n",
            dir.path().join("data")
        ),
    )
    .unwrap();
    let out = tokio::time::timeout(
        Duration::from_secs(20),
        tokio::process::Command::new(pforte_tests::bin("pforte"))
            .args(["serve", "--init", "--config", config.to_str().unwrap()])
            .output(),
    )
    .await
    .expect("the second gateway exits")
    .unwrap();
    assert_ne!(out.status.code(), Some(0));
    assert_eq!(
        String::from_utf8_lossy(&out.stderr).trim(),
        format!("pforte: {addr} is in use; set `listen` in the config file or PFORTE_LISTEN")
    );
    // The first still serves.
    let ok = gw.http().get(format!("{}/healthz", gw.base)).send().await;
    assert_eq!(ok.unwrap().status(), 200);
}
