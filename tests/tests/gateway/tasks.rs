//! Task records (SEP-2663, issue 40 point 3) end to end, through the real gateway in front of
//! raw task-capable upstreams: a task's record outlives a gateway restart on the embedded store
//! (`sessions.db`); with two replicas on one route, a task's requests go to the replica that
//! created it, and to no other once it is gone; the task's tool's scopes apply to its task
//! requests; a creator's cancel is audited (`task_cancelled`).
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::time::Duration;

use pforte_tests::{Limits, RawUpstream, RedisServer, Route, Stack, eventually};
use serde_json::{Value, json};

use super::duties::{TASK, modern, post_mode, post_to, task_answer, task_upstream};

/// How many requests `upstream` saw whose request line has `mode=get`.
fn gets(upstream: &RawUpstream) -> usize {
    upstream
        .received()
        .iter()
        .map(|c| c.matches("mode=get").count())
        .sum()
}

/// A task-capable upstream whose `?mode=call` creates task `task` (and `?mode=get` tells its
/// status).
fn upstream_of(task: &'static str) -> impl Fn(&str) -> Vec<u8> + Send + Sync + 'static {
    move |head: &str| task_answer(task, head)
}

/// Point 3.1: without redis, task records live in `sessions.db`: after a restart on the same
/// data dir the creator's `tasks/get` still reaches the upstream (200) and another token's is
/// still 404.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_task_record_outlives_a_restart_on_the_embedded_store() {
    let upstream = RawUpstream::start(task_upstream).await;
    let mut stack = Stack::builder()
        .upstream(&upstream.mcp_url())
        .plain_http()
        .limits(Limits::off())
        .start()
        .await;
    let a = stack.gw.create_token("task-a").await.unwrap();
    let b = stack.gw.create_token("task-b").await.unwrap();
    let call = modern(1, "tools/call", json!({"name": "slow", "arguments": {}}));
    let created = post_mode(&stack, &a, "call", &call, "slow").await;
    assert_eq!(created.status(), 200);

    stack.gw.restart().await.unwrap();

    let ask = modern(2, "tasks/get", json!({"taskId": TASK}));
    let refused = post_mode(&stack, &b, "get", &ask, TASK).await;
    assert_eq!(refused.status(), 404, "another token, after the restart");
    assert_eq!(gets(&upstream), 0);
    let polled = post_mode(&stack, &a, "get", &ask, TASK).await;
    assert_eq!(polled.status(), 200, "the creator, after the restart");
    let polled: Value = polled.json().await.unwrap();
    assert_eq!(polled["result"]["status"], "completed", "{polled}");
    assert_eq!(gets(&upstream), 1);
}

/// Point 3.2: two replicas on one route, each creating its own task. Each task's `tasks/get`
/// goes to the replica that created it (counted at each); once that replica is gone, its task
/// is "not found" (404, -32602) and the other replica is never asked. On the embedded store.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn task_requests_go_to_the_replica_that_holds_the_task() {
    task_requests_go_to_their_replica(None).await;
}

/// Point 3.2 with the records in redis (`pforte:task:…`, the instance kept in the record).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn task_requests_go_to_the_replica_that_holds_the_task_on_redis() {
    let Some(redis) = RedisServer::start() else {
        return;
    };
    task_requests_go_to_their_replica(Some(redis)).await;
}

async fn task_requests_go_to_their_replica(redis: Option<RedisServer>) {
    const ONE: &str = "task-of-replica-one";
    const TWO: &str = "task-of-replica-two";
    let one = RawUpstream::start(upstream_of(ONE)).await;
    let two = RawUpstream::start(upstream_of(TWO)).await;
    let mut builder = Stack::builder()
        .upstream(&one.mcp_url())
        .route(Route::replicas("pair", &[one.mcp_url(), two.mcp_url()]))
        .plain_http()
        .limits(Limits::off());
    if let Some(redis) = redis {
        builder = builder.redis(redis);
    }
    let stack = builder.start().await;
    let url = stack.gw.route_url("pair");
    let a = stack.gw.create_token("replicas").await.unwrap();

    // Round-robin: a few calls create a task on each replica.
    let mut created = std::collections::BTreeSet::new();
    for id in 1..=6 {
        let call = modern(id, "tools/call", json!({"name": "slow", "arguments": {}}));
        let answer = post_to(&stack, &url, &a, "call", &call, "slow").await;
        assert_eq!(answer.status(), 200);
        let answer: Value = answer.json().await.unwrap();
        created.insert(answer["result"]["taskId"].as_str().unwrap().to_owned());
        if created.len() == 2 {
            break;
        }
    }
    assert_eq!(
        created.len(),
        2,
        "both replicas created a task: {created:?}"
    );

    for round in 1..=2 {
        for (task, holder) in [(ONE, &one), (TWO, &two)] {
            let ask = modern(10, "tasks/get", json!({"taskId": task}));
            let polled = post_to(&stack, &url, &a, "get", &ask, task).await;
            assert_eq!(polled.status(), 200, "{task}");
            let polled: Value = polled.json().await.unwrap();
            assert_eq!(polled["result"]["taskId"], task, "answered by its creator");
            assert_eq!(gets(holder), round, "{task} went to the replica holding it");
        }
    }

    // Replica one goes away: its task is not found, and replica two never sees the request.
    drop(one);
    let ask = modern(11, "tasks/get", json!({"taskId": ONE}));
    let gone = post_to(&stack, &url, &a, "get", &ask, ONE).await;
    assert_eq!(gone.status(), 404);
    let gone: Value = gone.json().await.unwrap();
    assert_eq!(gone["error"]["code"], -32602, "{gone}");
    assert_eq!(gone["id"], 11, "{gone}");
    assert_eq!(
        gets(&two),
        2,
        "the other replica was asked for a task it does not hold"
    );
    // The other replica's task is unaffected.
    let ask = modern(12, "tasks/get", json!({"taskId": TWO}));
    assert_eq!(
        post_to(&stack, &url, &a, "get", &ask, TWO).await.status(),
        200
    );
    assert_eq!(gets(&two), 3);
}

/// Point 3.3: a task carries its tool's scopes (`[tools.slow] scopes`): its creator's token,
/// reissued under the same name without that scope, gets 403 `insufficient_scope` on
/// `tasks/get` of the task, naming the scope, and the upstream never sees the request.
#[tokio::test]
async fn a_task_request_needs_its_tools_scopes() {
    let upstream = RawUpstream::start(task_upstream).await;
    let stack = Stack::builder()
        .upstream(&upstream.mcp_url())
        .plain_http()
        .limits(Limits::off())
        .tool_scopes("slow", &["mcp:read", "mcp:write"])
        .start()
        .await;
    let full = stack
        .gw
        .create_scoped_token("worker", &["mcp:read", "mcp:write"])
        .await
        .unwrap();
    let call = modern(1, "tools/call", json!({"name": "slow", "arguments": {}}));
    assert_eq!(
        post_mode(&stack, &full, "call", &call, "slow")
            .await
            .status(),
        200
    );

    // The same principal (`worker`), now with read only.
    stack.gw.token_cmd(&["revoke", "worker"]).unwrap();
    let read_only = stack
        .gw
        .create_scoped_token("worker", &["mcp:read"])
        .await
        .unwrap();
    let ask = modern(2, "tasks/get", json!({"taskId": TASK}));
    let refused = post_mode(&stack, &read_only, "get", &ask, TASK).await;
    assert_eq!(refused.status(), 403);
    let challenge = refused.headers()["www-authenticate"]
        .to_str()
        .unwrap()
        .to_owned();
    assert!(
        challenge.contains("error=\"insufficient_scope\""),
        "{challenge}"
    );
    assert!(
        challenge.contains("scope=\"mcp:read mcp:write\""),
        "{challenge}"
    );
    let body: Value = refused.json().await.unwrap();
    assert_eq!(body["missing_scope"], "mcp:write", "{body}");
    assert_eq!(
        gets(&upstream),
        0,
        "a task request beyond its tool's scopes went upstream"
    );
}

/// Point 3.4: a creator's `tasks/cancel` that the upstream answered is audited as
/// `task_cancelled` (task, tool, route, status), after the `task_created` line.
#[tokio::test]
async fn a_cancelled_task_is_audited() {
    let upstream = RawUpstream::start(task_upstream).await;
    let stack = Stack::builder()
        .upstream(&upstream.mcp_url())
        .plain_http()
        .limits(Limits::off())
        .start()
        .await;
    let a = stack.gw.create_token("canceller").await.unwrap();
    let call = modern(1, "tools/call", json!({"name": "slow", "arguments": {}}));
    assert_eq!(
        post_mode(&stack, &a, "call", &call, "slow").await.status(),
        200
    );
    let cancel = modern(2, "tasks/cancel", json!({"taskId": TASK}));
    assert_eq!(
        post_mode(&stack, &a, "get", &cancel, TASK).await.status(),
        200
    );

    let path = stack.gw.data_dir().join("audit.jsonl");
    let found = eventually(Duration::from_secs(5), || {
        let path = path.clone();
        async move { std::fs::read_to_string(&path).is_ok_and(|t| t.contains("task_cancelled")) }
    })
    .await;
    assert!(found, "no task_cancelled line in {}", path.display());
    let lines: Vec<Value> = std::fs::read_to_string(&path)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .filter(|l: &Value| l["event"].as_str().is_some_and(|e| e.starts_with("task_")))
        .collect();
    assert_eq!(lines.len(), 2, "{lines:#?}");
    assert_eq!(lines[0]["event"], "task_created");
    let cancelled = &lines[1];
    assert_eq!(cancelled["event"], "task_cancelled");
    assert_eq!(cancelled["task"], TASK);
    assert_eq!(cancelled["tool"], "slow");
    assert_eq!(cancelled["status"], 200);
    assert_eq!(cancelled["principal"]["client"], "canceller", "{cancelled}");
}
