//! A rolling restart under load: three gateways on one redis in front of one mcp-service,
//! restarted one by one (taken out of the clients' rotation as Kubernetes takes a terminating
//! pod out of its endpoints, then SIGTERM, drain, start again, back in rotation) while workers
//! call in MCP sessions (HTTP route) and long event streams stay open. No admitted request is
//! lost (served counted, failed: 0); a stream the drain closes is resumed on another gateway
//! with the last event id it saw.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::{
    sync::{
        Arc,
        atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering},
    },
    time::Duration,
};

use futures::StreamExt as _;
use pforte_tests::{Limits, McpClient, McpService, RedisServer, Stack, eventually};
use serde_json::json;

/// The gateways' MCP clients (each trusts its own certificate) and which are in rotation.
struct Rotation {
    clients: Vec<McpClient>,
    live: Vec<AtomicBool>,
    next: AtomicUsize,
}

impl Rotation {
    /// The next gateway in rotation (round robin), in `session`.
    fn pick(&self, session: Option<&str>) -> (usize, McpClient) {
        for _ in 0..self.clients.len() * 4 {
            let i = self.next.fetch_add(1, Ordering::Relaxed) % self.clients.len();
            if self.live[i].load(Ordering::Relaxed) {
                return (i, self.clients[i].clone().in_session(session));
            }
        }
        panic!("no gateway in rotation");
    }
}

#[derive(Default)]
struct Counts {
    served: AtomicU64,
    failed: AtomicU64,
    not_admitted: AtomicU64,
    streams_ended: AtomicU64,
    streams_ended_with_id: AtomicU64,
    streams_resumed: AtomicU64,
}

/// The last `id:` field in `text` (an SSE stream's bytes so far).
fn last_id(text: &str) -> Option<String> {
    text.lines()
        .filter_map(|l| l.strip_prefix("id:"))
        .map(|id| id.trim().to_owned())
        .next_back()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rolling_restart_of_three_gateways_loses_no_admitted_request() {
    let Some(redis) = RedisServer::start() else {
        return;
    };
    let svc = McpService::start(&[]).unwrap();
    let start = |public: Option<String>| {
        let mut b = Stack::builder()
            .upstream(&svc.url())
            .redis_url(&redis.url())
            .limits(Limits::off())
            // The drain on SIGTERM: in-flight calls finish, kept-alive connections hear
            // `Connection: close` on their next request.
            .drain_secs(2);
        if let Some(url) = public {
            b = b.public_url(&url);
        }
        b.start()
    };
    let g0 = start(None).await;
    let public = g0.base.clone();
    let mut gws = [
        g0,
        start(Some(public.clone())).await,
        start(Some(public)).await,
    ];
    let token = gws[0].create_token("rolling").await.unwrap();
    for gw in &gws[1..] {
        let http = gw.http();
        let known = eventually(Duration::from_secs(5), || {
            let req = http.get(gw.mcp_url()).bearer_auth(&token).send();
            async move { req.await.is_ok_and(|r| r.status() != 401) }
        })
        .await;
        assert!(known, "a gateway never learned the token");
    }
    let rotation = Arc::new(Rotation {
        clients: gws
            .iter()
            .map(|g| g.mcp(&token).client_name("rolling"))
            .collect(),
        live: (0..3).map(|_| AtomicBool::new(true)).collect(),
        next: AtomicUsize::new(0),
    });
    let counts = Arc::new(Counts::default());
    let stop = Arc::new(AtomicBool::new(false));

    // Callers: a session each, pings through whichever gateway is next.
    let mut tasks = Vec::new();
    for _ in 0..4 {
        let (rotation, counts, stop) = (rotation.clone(), counts.clone(), stop.clone());
        tasks.push(tokio::spawn(async move {
            let (_, mut opener) = rotation.pick(None);
            opener.open().await.expect("initialize");
            let session = opener.session().unwrap().to_owned();
            for _ in 0..1_000_000 {
                if stop.load(Ordering::Relaxed) {
                    break;
                }
                let (_, client) = rotation.pick(Some(&session));
                let body = json!({"jsonrpc": "2.0", "id": 1, "method": "ping"});
                let outcome = match client.post_request().body(body.to_string()).send().await {
                    Ok(r) if r.status() == 200 => {
                        r.bytes().await.map(drop).map_err(|e| e.to_string())
                    }
                    Ok(r) => Err(r.status().to_string()),
                    // Refused before the request was sent: never admitted, sent elsewhere.
                    Err(e) if e.is_connect() => {
                        counts.not_admitted.fetch_add(1, Ordering::Relaxed);
                        continue;
                    }
                    Err(e) => Err(e.to_string()),
                };
                match outcome {
                    Ok(()) => counts.served.fetch_add(1, Ordering::Relaxed),
                    Err(what) => {
                        eprintln!("failed: {what}");
                        counts.failed.fetch_add(1, Ordering::Relaxed)
                    }
                };
            }
        }));
    }
    // Long event streams: each held open until a drain ends it, then resumed elsewhere.
    for _ in 0..2 {
        let (rotation, counts, stop) = (rotation.clone(), counts.clone(), stop.clone());
        tasks.push(tokio::spawn(async move {
            let (_, mut opener) = rotation.pick(None);
            opener.open().await.expect("initialize");
            let session = opener.session().unwrap().to_owned();
            let mut last: Option<String> = None;
            for _ in 0..1000 {
                if stop.load(Ordering::Relaxed) {
                    break;
                }
                let (_, client) = rotation.pick(Some(&session));
                let mut req = client.stream_request();
                if let Some(id) = &last {
                    req = req.header("last-event-id", id);
                }
                let resp = match req.send().await {
                    Ok(r) if r.status() == 200 => r,
                    Err(e) if e.is_connect() => continue,
                    other => panic!("a stream was refused: {:?}", other.map(|r| r.status())),
                };
                if last.is_some() {
                    counts.streams_resumed.fetch_add(1, Ordering::Relaxed);
                }
                let mut body = resp.bytes_stream();
                let mut seen = String::new();
                loop {
                    tokio::select! {
                        chunk = body.next() => match chunk {
                            Some(Ok(bytes)) => seen.push_str(&String::from_utf8_lossy(&bytes)),
                            _ => break,
                        },
                        () = tokio::time::sleep(Duration::from_millis(200)) => {
                            if stop.load(Ordering::Relaxed) { return; }
                        }
                    }
                }
                counts.streams_ended.fetch_add(1, Ordering::Relaxed);
                if let Some(id) = last_id(&seen) {
                    counts.streams_ended_with_id.fetch_add(1, Ordering::Relaxed);
                    last = Some(id);
                }
            }
        }));
    }
    let warm = eventually(Duration::from_secs(10), || async {
        counts.served.load(Ordering::Relaxed) >= 200
    })
    .await;
    assert!(warm, "the load never got going");

    for (i, gw) in gws.iter_mut().enumerate() {
        rotation.live[i].store(false, Ordering::Relaxed);
        tokio::task::block_in_place(|| tokio::runtime::Handle::current().block_on(gw.restart()))
            .unwrap();
        rotation.live[i].store(true, Ordering::Relaxed);
        let before = counts.served.load(Ordering::Relaxed);
        let again = eventually(Duration::from_secs(10), || async {
            counts.served.load(Ordering::Relaxed) >= before + 100
        })
        .await;
        assert!(again, "calls stopped after gateway {i} came back");
        eprintln!("gateway {i} restarted");
    }
    stop.store(true, Ordering::Relaxed);
    for t in tasks {
        t.await.unwrap();
    }
    let c = |a: &AtomicU64| a.load(Ordering::Relaxed);
    eprintln!(
        "rolling restart: {} served, {} failed, {} not admitted (refused, sent elsewhere); \
         streams: {} ended by a drain, {} with an event id, {} resumed on another gateway",
        c(&counts.served),
        c(&counts.failed),
        c(&counts.not_admitted),
        c(&counts.streams_ended),
        c(&counts.streams_ended_with_id),
        c(&counts.streams_resumed)
    );
    assert_eq!(c(&counts.failed), 0, "admitted requests were lost");
    assert!(
        c(&counts.streams_ended) >= 1,
        "no stream was ended by a drain"
    );
}
