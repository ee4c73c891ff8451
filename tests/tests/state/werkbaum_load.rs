//! Werkbaum documents under load through the gateway: 50 concurrent writers with random stale
//! and fresh bases lose nothing; `kill -9` during writes loses no acknowledged write; two
//! mcp-service replicas on one redis share documents with an atomic compare-and-set.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use super::werkbaum_support::{Rng, Werkbaum, base_of, call, create, history_all, try_call};
use pforte_tests::{Limits, McpService, RedisServer, Stack, eventually};
use serde_json::{Value, json};

const ROOT: &str = "- [ ] Load test #root\n";

/// Everything a writer saw acknowledged: version → node id.
type Acks = Arc<Mutex<BTreeMap<u64, String>>>;

fn check_no_lost_update(acks: &BTreeMap<u64, String>, history: &Value, text: &str) {
    let entries = history["entries"].as_array().unwrap();
    let versions: Vec<u64> = entries
        .iter()
        .map(|e| e["version"].as_u64().unwrap())
        .collect();
    let expected: Vec<u64> = (1..=versions.len() as u64).collect();
    assert_eq!(
        versions, expected,
        "history is 1..=n, each version exactly once"
    );
    for (version, id) in acks {
        let e = &entries[usize::try_from(*version).unwrap() - 1];
        assert!(
            e["subject"].as_str().unwrap().contains(&format!("#{id}")),
            "v{version} is the write of {id}: {e}"
        );
        assert_eq!(
            text.matches(&format!("#{id}\n")).count(),
            1,
            "acknowledged {id} (v{version}) is in the text exactly once"
        );
    }
    assert_eq!(
        text.matches(" #w").count(),
        acks.len(),
        "no write is in the text that was not acknowledged"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fifty_concurrent_writers_lose_no_update() {
    let stack = Werkbaum::start(&[]).await;
    let c = stack.client().await;
    let (doc, first_base) = create(&c, "Load", ROOT, false).await;
    let mut clients = Vec::new();
    for _ in 0..10 {
        clients.push(Arc::new(stack.client().await));
    }
    let acks: Acks = Arc::default();
    let conflicts = Arc::new(Mutex::new(0u32));
    let mut tasks = Vec::new();
    for w in 0..50u64 {
        let client = Arc::clone(&clients[usize::try_from(w).unwrap() % clients.len()]);
        let (doc, acks, conflicts) = (doc.clone(), Arc::clone(&acks), Arc::clone(&conflicts));
        let mut stale = first_base.clone();
        tasks.push(tokio::spawn(async move {
            let mut rng = Rng::new(0x5eed + w);
            for k in 0..3 {
                let base = if rng.coin() {
                    base_of(&client, &doc).await
                } else {
                    stale.clone()
                };
                let id = format!("w{w}k{k}");
                let r = call(
                    &client,
                    "werkbaum_add_node",
                    json!({"document": doc, "base": base, "parent": "root",
                           "line": format!("- [ ] writer {w} step {k} (XS) #{id}")}),
                )
                .await;
                if r.is_error {
                    let e = r.err();
                    assert_eq!(e["code"], "conflict", "{e}");
                    assert!(e["current"]["text"].is_string());
                    *conflicts.lock().unwrap() += 1;
                    stale = json!({"version": e["current"]["version"], "checksum": e["current"]["checksum"]});
                } else {
                    let r = r.ok();
                    let v = r["version"].as_u64().unwrap();
                    let prev = acks.lock().unwrap().insert(v, id);
                    assert!(prev.is_none(), "version {v} acknowledged twice");
                    stale = json!({"version": v, "checksum": r["checksum"]});
                }
            }
        }));
    }
    for t in tasks {
        t.await.unwrap();
    }
    let acks = acks.lock().unwrap().clone();
    let conflicts = *conflicts.lock().unwrap();
    assert_eq!(acks.len() + conflicts as usize, 150);
    assert!(acks.len() >= 3, "too few writes landed: {}", acks.len());
    let history = history_all(&c, &doc).await;
    let text = call(&c, "werkbaum_read", json!({"document": doc}))
        .await
        .ok()["text"]
        .as_str()
        .unwrap()
        .to_owned();
    assert_eq!(history["entries"].as_array().unwrap().len(), acks.len() + 1);
    check_no_lost_update(&acks, &history, &text);
    eprintln!(
        "50 writers: {} acknowledged, {conflicts} conflicts, 0 lost",
        acks.len()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kill_9_during_writes_keeps_every_acknowledged_write() {
    let stack = Werkbaum::start(&[]).await;
    let c = stack.client().await;
    let (doc, _) = create(&c, "Crash", ROOT, false).await;
    let acks: Acks = Arc::default();
    let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let mut tasks = Vec::new();
    for w in 0..4u64 {
        let client = Arc::new(stack.client().await);
        let (doc, acks, stop) = (doc.clone(), Arc::clone(&acks), Arc::clone(&stop));
        tasks.push(tokio::spawn(async move {
            for k in 0.. {
                if stop.load(std::sync::atomic::Ordering::SeqCst) {
                    break;
                }
                let Ok(read) = try_call(&client, "werkbaum_read", json!({"document": doc})).await
                else {
                    break;
                };
                if read.is_error {
                    break;
                }
                let base = json!({"version": read.data["revision"]["version"], "checksum": read.data["revision"]["checksum"]});
                let id = format!("w{w}k{k}");
                let r = try_call(
                    &client,
                    "werkbaum_add_node",
                    json!({"document": doc, "base": base, "parent": "root",
                           "line": format!("- [ ] crash writer {w} step {k} #{id}")}),
                )
                .await;
                match r {
                    Ok(a) if !a.is_error => {
                        let v = a.data["version"].as_u64().unwrap();
                        acks.lock().unwrap().insert(v, id);
                    }
                    Ok(a) if a.data["error"]["code"] == "conflict" => {}
                    _ => break,
                }
            }
        }));
    }
    let enough = eventually(Duration::from_secs(60), || {
        let acks = Arc::clone(&acks);
        async move { acks.lock().unwrap().len() >= 20 }
    })
    .await;
    assert!(enough, "writers did not get 20 writes through");
    let Werkbaum { mut gw, data, .. } = stack;
    let svc = gw.service_mut();
    svc.proc.child.kill().unwrap(); // SIGKILL while the writers are still writing
    svc.proc.child.wait().unwrap();
    stop.store(true, std::sync::atomic::Ordering::SeqCst);
    // A call in flight when the service died may never get an answer: it was not
    // acknowledged, so the writer can simply be dropped.
    for t in tasks {
        t.abort();
        let _ = t.await;
    }
    drop(gw);
    let acks = acks.lock().unwrap().clone();

    let restarted = Werkbaum::start_in(data, &[]).await;
    let c = restarted.client().await;
    let history = history_all(&c, &doc).await;
    let text = call(&c, "werkbaum_read", json!({"document": doc}))
        .await
        .ok()["text"]
        .as_str()
        .unwrap()
        .to_owned();
    // A write may have landed without its answer reaching the client; every acknowledged one
    // must be there.
    for (version, id) in &acks {
        let e = &history["entries"][usize::try_from(*version).unwrap() - 1];
        assert_eq!(e["version"], *version);
        assert!(e["subject"].as_str().unwrap().contains(&format!("#{id}")));
        assert_eq!(text.matches(&format!("#{id}\n")).count(), 1, "{id} lost");
    }
    eprintln!(
        "kill -9: {} acknowledged writes, all present after restart",
        acks.len()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_replicas_share_documents_on_redis() {
    let Some(redis) = RedisServer::options().append_only().start() else {
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
    let a = McpService::start(&["--config", &config]).unwrap();
    let b = McpService::start(&["--config", &config]).unwrap();
    let gw_a = Stack::builder()
        .service(a)
        .limits(Limits::off())
        .start()
        .await;
    let gw_b = Stack::builder()
        .service(b)
        .limits(Limits::off())
        .start()
        .await;
    let ta = gw_a.create_token("replica-a").await.unwrap();
    let tb = gw_b.create_token("replica-b").await.unwrap();
    let ca = gw_a.rmcp_client(&ta, &[]).await.unwrap();
    let cb = gw_b.rmcp_client(&tb, &[]).await.unwrap();
    let (doc, base) = create(&ca, "Shared on redis", ROOT, false).await;
    assert_eq!(
        base_of(&cb, &doc).await,
        base,
        "replica b sees replica a's document"
    );
    // Same base on both replicas at once: exactly one wins.
    let wa = call(
        &ca,
        "werkbaum_add_node",
        json!({"document": doc, "base": base, "parent": "root", "line": "- a #wa"}),
    );
    let wb = call(
        &cb,
        "werkbaum_add_node",
        json!({"document": doc, "base": base, "parent": "root", "line": "- b #wb"}),
    );
    let (wa, wb) = tokio::join!(wa, wb);
    assert_eq!(u8::from(wa.is_error) + u8::from(wb.is_error), 1);
    let h = call(&cb, "werkbaum_history", json!({"document": doc}))
        .await
        .ok();
    assert_eq!(h["entries"].as_array().unwrap().len(), 2);
    let list = ca.list_all_resources().await.unwrap();
    assert!(list.iter().any(|r| r.uri.ends_with(&doc)));
}
