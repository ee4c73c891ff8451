//! Replicas of one MCP server behind one route (`urls = [...]`): two mcp-service instances on
//! one redis (shared documents, sessions of their own), two gateways on another key space of
//! the same redis (shared session records). Sessions stick to the instance that opened them
//! through either gateway; documents written through one replica are read through the other;
//! when a replica dies its sessions get 404, clients re-initialize onto the survivor, and no
//! new session reaches the dead one; when it answers again, new sessions reach it again.
//!
//! Which replica holds a session is asked of the replicas themselves: mcp-service keeps its
//! sessions in process, so only the replica that opened a session answers a `ping` in it (the
//! other says 404), and a call through a gateway that succeeds in a session proves the
//! gateway sent it to that replica.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::{process::Command, time::Duration};

use pforte_tests::{
    Gateway, Limits, McpClient, McpService, Proc, RedisServer, Route, Stack, eventually,
    http_client, rpc_answer,
};
use reqwest::StatusCode;
use serde_json::{Value, json};

const PLAN: &str = "- [ ] Shared across replicas #root\n";

/// One MCP endpoint (a gateway's route, or a replica directly) spoken to by hand, so the test
/// sees every status and session id; one endpoint serves many sessions.
struct Endpoint {
    client: McpClient,
}

impl Endpoint {
    fn via(gw: &Gateway, token: &str) -> Self {
        Self {
            client: gw
                .mcp_at(&gw.route_url("plans"), token)
                .client_name("replicas-test"),
        }
    }

    fn direct(replica: &McpService) -> Self {
        Self {
            client: McpClient::new(http_client(None), &replica.url()).client_name("replicas-test"),
        }
    }

    /// The endpoint's client in `session` (or in none).
    fn client(&self, session: Option<&str>) -> McpClient {
        self.client.clone().in_session(session)
    }

    async fn post(
        &self,
        session: Option<&str>,
        body: &Value,
    ) -> reqwest::Result<reqwest::Response> {
        self.client(session)
            .post_request()
            .body(body.to_string())
            .send()
            .await
    }

    /// `initialize` and `notifications/initialized`: the new session's id, or the status of
    /// the refusal.
    async fn open(&self) -> Result<String, StatusCode> {
        let mut client = self.client(None);
        client.open().await.map_err(|refused| refused.status())?;
        Ok(client
            .session()
            .expect("initialize answer without Mcp-Session-Id")
            .to_owned())
    }

    /// A request in `session`: its status and, on 200, the JSON-RPC result.
    async fn request(
        &self,
        session: &str,
        method: &str,
        params: Value,
    ) -> (StatusCode, Option<Value>) {
        let body = json!({"jsonrpc": "2.0", "id": 7, "method": method, "params": params});
        let resp = self.post(Some(session), &body).await.unwrap();
        let status = resp.status();
        let result = if status == StatusCode::OK {
            rpc_answer(resp).await.get("result").cloned()
        } else {
            None
        };
        (status, result)
    }

    /// A tool's structured answer; panics unless the call succeeded.
    async fn tool(&self, session: &str, name: &str, args: Value) -> Value {
        let (status, result) = self
            .request(
                session,
                "tools/call",
                json!({"name": name, "arguments": args}),
            )
            .await;
        assert_eq!(status, StatusCode::OK, "{name} in {session}");
        let result = result.unwrap_or_else(|| panic!("{name}: no result"));
        assert_ne!(result["isError"], json!(true), "{name}: {result}");
        result["structuredContent"].clone()
    }

    /// Ends `session` (`DELETE`), so it stops counting against the principal's sessions.
    async fn close(&self, session: &str) -> StatusCode {
        self.client(Some(session)).delete().await.status()
    }

    /// The status of a `ping` in `session`.
    async fn ping(&self, session: &str) -> StatusCode {
        self.request(session, "ping", json!({})).await.0
    }
}

/// Which of `replicas` holds `session` (the one that answers a ping in it), asked directly.
async fn holder(replicas: &[&Endpoint], session: &str) -> usize {
    let mut holders = Vec::new();
    for (i, r) in replicas.iter().enumerate() {
        match r.ping(session).await {
            StatusCode::OK => holders.push(i),
            StatusCode::NOT_FOUND => {}
            other => panic!("replica {i} answered {other} to a ping in {session}"),
        }
    }
    assert_eq!(holders.len(), 1, "{session} is held by {holders:?}");
    holders[0]
}

/// A gateway with the route `plans` over both replicas, its session records on `redis`.
async fn gateway(
    redis: &RedisServer,
    replicas: [&McpService; 2],
    public_url: Option<&str>,
) -> Stack {
    let mut stack = Stack::builder()
        .upstream(&replicas[0].url())
        .redis_url(&redis.url())
        .limits(Limits::off())
        .route(
            Route::replicas("plans", &[replicas[0].url(), replicas[1].url()])
                .connect_timeout_ms(500),
        );
    if let Some(url) = public_url {
        // In production both sit behind one load balancer, under one public URL.
        stack = stack.public_url(url);
    }
    stack.start().await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sessions_stick_to_their_replica_across_gateways_and_move_when_it_dies() {
    let Some(redis) = RedisServer::start() else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("mcp.toml");
    std::fs::write(
        &config,
        format!("store = \"redis\"\nredis_url = {:?}\n", redis.url()),
    )
    .unwrap();
    let config = config.display().to_string();
    let r0 = McpService::start(&["--config", &config]).unwrap();
    let mut r1 = McpService::start(&["--config", &config]).unwrap();
    let gw_a = gateway(&redis, [&r0, &r1], None).await;
    let gw_b = gateway(&redis, [&r0, &r1], Some(&gw_a.base)).await;
    let token = gw_a.create_token("replicas").await.unwrap();
    let (a, b) = (Endpoint::via(&gw_a, &token), Endpoint::via(&gw_b, &token));
    let b_knows = eventually(Duration::from_secs(5), || async {
        b.post(None, &json!({}))
            .await
            .is_ok_and(|r| r.status() != StatusCode::UNAUTHORIZED)
    })
    .await;
    assert!(
        b_knows,
        "gateway B never accepted the token created through A"
    );
    let (d0, d1) = (Endpoint::direct(&r0), Endpoint::direct(&r1));
    let replicas = [&d0, &d1];

    // New sessions are balanced over both replicas, through each gateway.
    let mut sessions = Vec::new();
    for gw in [&a, &b] {
        let mut held = [0, 0];
        for _ in 0..4 {
            let s = gw.open().await.unwrap();
            held[holder(&replicas, &s).await] += 1;
            sessions.push(s);
        }
        assert_eq!(held, [2, 2], "round-robin over two healthy replicas");
    }

    // Every session works through both gateways: the other replica would have said 404.
    for s in &sessions {
        let before = holder(&replicas, s).await;
        for gw in [&a, &b] {
            let who = gw.tool(s, "whoami", json!({})).await;
            assert_eq!(who["client"], "replicas", "{who}");
        }
        assert_eq!(holder(&replicas, s).await, before, "{s} moved");
    }

    // A document written through one replica is read through the other.
    let mut on = [None, None];
    for s in &sessions {
        on[holder(&replicas, s).await].get_or_insert_with(|| s.clone());
    }
    let (s0, s1) = (on[0].clone().unwrap(), on[1].clone().unwrap());
    let created = a
        .tool(
            &s0,
            "werkbaum_create",
            json!({"title": "Replicas", "text": PLAN, "allowWarnings": false, "allowProd": false}),
        )
        .await;
    let doc = created["document"].as_str().unwrap().to_owned();
    let read = b.tool(&s1, "werkbaum_read", json!({"document": doc})).await;
    assert_eq!(read["revision"]["version"], created["version"], "{read}");
    assert!(read["text"].as_str().unwrap().contains("#root"), "{read}");
    let base = json!({"version": created["version"], "checksum": created["checksum"]});
    b.tool(
        &s1,
        "werkbaum_add_node",
        json!({"document": doc, "base": base, "parent": "root", "line": "- [ ] Via replica one #one"}),
    )
    .await;
    let read = a.tool(&s0, "werkbaum_read", json!({"document": doc})).await;
    assert!(read["text"].as_str().unwrap().contains("#one"), "{read}");

    // Replica one dies mid-run.
    let holders: Vec<usize> = {
        let mut h = Vec::new();
        for s in &sessions {
            h.push(holder(&replicas, s).await);
        }
        h
    };
    r1.proc
        .signal_and_wait(nix::sys::signal::Signal::SIGKILL, Duration::from_secs(5))
        .unwrap();

    // Its sessions get 404 through either gateway (the MCP rule: re-initialize); the
    // survivor's sessions keep working.
    for (s, &held) in sessions.iter().zip(&holders) {
        for gw in [&a, &b] {
            let (status, _) = gw
                .request(s, "tools/call", json!({"name": "whoami", "arguments": {}}))
                .await;
            let expected = if held == 1 {
                StatusCode::NOT_FOUND
            } else {
                StatusCode::OK
            };
            assert_eq!(status, expected, "{s} (replica {held})");
        }
    }

    // Clients re-initialize: every new session lands on the survivor, through both gateways,
    // and none fails on the way.
    let survivor = [&d0];
    for _ in 0..4 {
        for gw in [&a, &b] {
            let s = gw
                .open()
                .await
                .expect("a new session after the replica died");
            assert_eq!(holder(&survivor, &s).await, 0);
            assert_eq!(d1_status(&d1, &s).await, None, "replica one is dead");
            gw.tool(&s, "whoami", json!({})).await;
        }
    }
    // The documents are all there, read through the survivor.
    let read = b.tool(&s0, "werkbaum_read", json!({"document": doc})).await;
    assert!(read["text"].as_str().unwrap().contains("#one"), "{read}");

    // Replica one comes back on its address: the prober puts it back within seconds, and new
    // sessions reach it again through both gateways.
    let mut cmd = Command::new(pforte_tests::bin("mcp-service"));
    cmd.env("MCP_SERVICE_DATA_DIR", dir.path()).args([
        "serve",
        "--listen",
        &r1.addr.to_string(),
        "--config",
        &config,
    ]);
    let mut back = Proc::spawn(cmd).unwrap();
    back.wait_line("listening on", Duration::from_secs(30))
        .unwrap();
    for gw in [&a, &b] {
        let reached = eventually(Duration::from_secs(10), || async {
            let s = gw.open().await.unwrap();
            let back = holder(&replicas, &s).await == 1;
            assert!(gw.close(&s).await.is_success());
            back
        })
        .await;
        assert!(reached, "no new session reached the replica that came back");
    }
}

/// What the dead replica answers: nothing (`None`) once it is gone.
async fn d1_status(d1: &Endpoint, session: &str) -> Option<StatusCode> {
    let body = json!({"jsonrpc": "2.0", "id": 1, "method": "ping"});
    d1.post(Some(session), &body).await.ok().map(|r| r.status())
}
