//! The shared store test suite, run on the embedded (SQLite) and the redis backend.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::sync::Arc;

use serde_json::json;

use super::{
    Change, Document, HistoryEntry, HistoryPage, RedisStore, SqliteStore, Store, StoreError,
    WriteOutcome,
};
use pforte_test_support::RedisServer;

fn doc(uuid: &str, title: &str, text: &str, version: u64) -> Document {
    Document {
        uuid: uuid.to_owned(),
        title: title.to_owned(),
        text: text.to_owned(),
        version,
        checksum: format!("sum-{text}"),
        updated_at: 1000 + version,
    }
}

fn entry(version: u64, who: &str) -> HistoryEntry {
    HistoryEntry {
        version,
        time: 1000 + version,
        author: format!("Agent · {who}"),
        host: "Agent".to_owned(),
        user: Some(who.to_owned()),
        client_id: Some("tok".to_owned()),
        subject: format!("write v{version}"),
        ops: json!([{"op": "replace", "index": 0, "count": 1, "lines": [format!("v{version}")]}]),
        checksum: format!("sum-v{version}"),
    }
}

/// A document cap the suite never reaches, and a page that holds every version.
const CAP: u64 = 10_000;
const ALL: usize = 1_000;

fn change<'a>(doc: &'a Document, entry: &'a HistoryEntry) -> Change<'a> {
    Change { doc, entry }
}

async fn run_suite(store: Arc<dyn Store>) {
    create_get_list(&*store).await;
    compare_and_set(&*store).await;
    history_since(&*store).await;
    history_pages(&*store).await;
    concurrent_same_base_one_wins(Arc::clone(&store)).await;
    document_cap(&*store).await;
}

async fn history_pages(store: &dyn Store) {
    // "a" is at version 3: pages of two from the start, then from a cursor.
    let page = |since, limit| async move {
        store
            .history(HistoryPage {
                uuid: "a",
                since,
                limit,
            })
            .await
            .unwrap()
            .unwrap()
            .iter()
            .map(|e| e.version)
            .collect::<Vec<_>>()
    };
    assert_eq!(page(None, 2).await, [1, 2]);
    assert_eq!(page(Some(2), 2).await, [3]);
    assert_eq!(page(Some(1), 1).await, [2]);
    assert!(page(None, 0).await.is_empty());
    assert_eq!(
        store
            .history(HistoryPage {
                uuid: "ghost",
                since: None,
                limit: 2
            })
            .await
            .unwrap(),
        None
    );
}

async fn document_cap(store: &dyn Store) {
    // The suite created a, b and u: a cap of 3 refuses a fourth, atomically and clearly.
    let d = doc("d", "Delta", "- four\n", 1);
    let err = store
        .create(change(&d, &entry(1, "dave")), 3)
        .await
        .unwrap_err();
    assert_eq!(err, StoreError::Full(3));
    assert!(err.to_string().contains("limit of 3 documents"), "{err}");
    assert_eq!(store.get("d").await.unwrap(), None);
    assert_eq!(
        store
            .history(HistoryPage {
                uuid: "d",
                since: None,
                limit: ALL
            })
            .await
            .unwrap(),
        None
    );
    assert_eq!(store.list().await.unwrap().len(), 3);
    store
        .create(change(&d, &entry(1, "dave")), 4)
        .await
        .unwrap();
    assert_eq!(store.list().await.unwrap().len(), 4);
}

async fn create_get_list(store: &dyn Store) {
    let a = doc("a", "Beta", "- one\n", 1);
    let b = doc("b", "Alpha", "- two\n", 1);
    store
        .create(change(&a, &entry(1, "alice")), CAP)
        .await
        .unwrap();
    store
        .create(change(&b, &entry(1, "bob")), CAP)
        .await
        .unwrap();
    assert_eq!(
        store
            .create(change(&a, &entry(1, "eve")), CAP)
            .await
            .unwrap_err(),
        StoreError::Exists("a".into())
    );
    assert_eq!(store.get("a").await.unwrap(), Some(a.clone()));
    assert_eq!(store.get("nope").await.unwrap(), None);
    let list = store.list().await.unwrap();
    let titles: Vec<_> = list.iter().map(|d| d.title.as_str()).collect();
    assert_eq!(titles, ["Alpha", "Beta"]);
    assert_eq!(list[1].version, 1);
    // Unicode and a text with every kind of line break survive byte-exactly.
    let u = doc("u", "Ünïcode", "- [x] Grüße 🌳\r\n  - b\r- c", 1);
    store.create(change(&u, &entry(1, "ü")), CAP).await.unwrap();
    assert_eq!(store.get("u").await.unwrap().unwrap().text, u.text);
}

async fn compare_and_set(store: &dyn Store) {
    let v2 = doc("a", "Beta", "- one\n- more\n", 2);
    assert_eq!(
        store
            .write(1, change(&v2, &entry(2, "alice")))
            .await
            .unwrap(),
        WriteOutcome::Written(v2.clone())
    );
    // Stale base: refused with the current document, nothing written.
    let stale = doc("a", "Beta", "- lost\n", 2);
    assert_eq!(
        store
            .write(1, change(&stale, &entry(2, "bob")))
            .await
            .unwrap(),
        WriteOutcome::Conflict(v2.clone())
    );
    assert_eq!(store.get("a").await.unwrap(), Some(v2));
    let ghost = doc("ghost", "G", "x", 2);
    assert_eq!(
        store
            .write(1, change(&ghost, &entry(2, "bob")))
            .await
            .unwrap(),
        WriteOutcome::NotFound
    );
    assert_eq!(
        store
            .history(HistoryPage {
                uuid: "ghost",
                since: None,
                limit: ALL
            })
            .await
            .unwrap(),
        None
    );
}

async fn history_since(store: &dyn Store) {
    let v3 = doc("a", "Beta", "- three\n", 3);
    store
        .write(2, change(&v3, &entry(3, "carol")))
        .await
        .unwrap();
    let all = store
        .history(HistoryPage {
            uuid: "a",
            since: None,
            limit: ALL,
        })
        .await
        .unwrap()
        .unwrap();
    let versions: Vec<_> = all.iter().map(|e| e.version).collect();
    assert_eq!(versions, [1, 2, 3]);
    assert_eq!(all[0].author, "Agent · alice");
    assert_eq!(all[2], entry(3, "carol"));
    let since = store
        .history(HistoryPage {
            uuid: "a",
            since: Some(1),
            limit: ALL,
        })
        .await
        .unwrap()
        .unwrap();
    assert_eq!(since.iter().map(|e| e.version).collect::<Vec<_>>(), [2, 3]);
    assert!(
        store
            .history(HistoryPage {
                uuid: "a",
                since: Some(3),
                limit: ALL
            })
            .await
            .unwrap()
            .unwrap()
            .is_empty()
    );
}

async fn concurrent_same_base_one_wins(store: Arc<dyn Store>) {
    let base = store.get("b").await.unwrap().unwrap();
    let tasks: Vec<_> = (0..16)
        .map(|i| {
            let store = Arc::clone(&store);
            let next = doc("b", "Alpha", &format!("- writer {i}\n"), base.version + 1);
            tokio::spawn(async move {
                store
                    .write(
                        base.version,
                        change(&next, &entry(base.version + 1, &format!("w{i}"))),
                    )
                    .await
                    .unwrap()
            })
        })
        .collect();
    let mut won = Vec::new();
    for t in tasks {
        if let WriteOutcome::Written(d) = t.await.unwrap() {
            won.push(d);
        }
    }
    assert_eq!(won.len(), 1, "exactly one writer wins");
    assert_eq!(store.get("b").await.unwrap().as_ref(), Some(&won[0]));
    let h = store
        .history(HistoryPage {
            uuid: "b",
            since: None,
            limit: ALL,
        })
        .await
        .unwrap()
        .unwrap();
    assert_eq!(h.iter().map(|e| e.version).collect::<Vec<_>>(), [1, 2]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sqlite_in_memory_passes_the_suite() {
    run_suite(Arc::new(SqliteStore::in_memory().unwrap())).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sqlite_file_passes_the_suite_and_survives_reopen() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("docs.sqlite3");
    run_suite(Arc::new(SqliteStore::open(&path).unwrap())).await;
    let reopened = SqliteStore::open(&path).unwrap();
    assert_eq!(reopened.get("a").await.unwrap().unwrap().version, 3);
    assert_eq!(
        reopened
            .history(HistoryPage {
                uuid: "a",
                since: None,
                limit: ALL
            })
            .await
            .unwrap()
            .unwrap()
            .len(),
        3
    );
}

/// The document store and its `-wal`/`-shm` are 0600 in a 0700 directory, also when the
/// directory already existed with a wider mode.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sqlite_files_are_owner_only() {
    use std::os::unix::fs::PermissionsExt as _;
    let mode = |p: &std::path::Path| std::fs::metadata(p).unwrap().permissions().mode() & 0o777;
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("service");
    std::fs::create_dir(&dir).unwrap();
    std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o755)).unwrap();
    let path = dir.join("docs.sqlite3");
    run_suite(Arc::new(SqliteStore::open(&path).unwrap())).await;
    let _reopened = SqliteStore::open(&path).unwrap();
    assert_eq!(mode(&dir), 0o700);
    for f in ["docs.sqlite3", "docs.sqlite3-wal", "docs.sqlite3-shm"] {
        assert_eq!(mode(&dir.join(f)), 0o600, "{f}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_passes_the_suite() {
    let Some(server) = RedisServer::start() else {
        return;
    };
    run_suite(Arc::new(
        RedisStore::connect(&server.url(), "test:werkbaum:").unwrap(),
    ))
    .await;
    // A second replica sees the same documents.
    let other = RedisStore::connect(&server.url(), "test:werkbaum:").unwrap();
    assert_eq!(other.get("a").await.unwrap().unwrap().version, 3);
}
