//! The vault on both stores (SQLite always; redis when `redis-server` is installed): records
//! sealed at rest and bound to their row, versions, single-use pending records that expire,
//! removal by person and by route, re-sealing under a new key, and a refresh made once by
//! many callers at once — in one process and across two vaults on one store.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::{
    sync::{
        Arc,
        atomic::{AtomicUsize, Ordering},
    },
    time::Duration,
};

use pforte_clock::ManualClock;

use super::scan::newest_connected;
use super::*;

fn clock() -> ManualClock {
    ManualClock::at(Duration::from_secs(1_800_000_000))
}

fn entry(route: &str, person: &str, value: &str) -> Entry {
    Entry {
        route: route.into(),
        person: person.into(),
        secret: Secret::Values([("X-Api-Key".to_owned(), value.to_owned())].into()),
        state: State::Connected,
        connected_ms: 1,
        refreshed_ms: None,
        expires_at_ms: None,
        version: 0,
    }
}

fn oauth(route: &str, person: &str, access: &str) -> Entry {
    Entry {
        secret: Secret::OAuth(OAuthTokens {
            access_token: access.into(),
            refresh_token: Some(format!("r-{access}")),
            expires_at_ms: Some(10),
            scope: None,
            client_id: "c".into(),
        }),
        ..entry(route, person, "")
    }
}

/// A vault on each store this machine has, with `ring`.
struct Site {
    _dir: tempfile::TempDir,
    _redis: Option<pforte_test_support::RedisServer>,
    backends: Vec<(&'static str, Arc<dyn Backend>)>,
}

fn site() -> Site {
    let dir = tempfile::tempdir().unwrap();
    let sqlite = sqlite::SqliteBackend::open(&dir.path().join(VAULT_DB)).unwrap();
    let mut backends: Vec<(&'static str, Arc<dyn Backend>)> = vec![("sqlite", Arc::new(sqlite))];
    let redis = pforte_test_support::RedisServer::start();
    if let Some(r) = &redis {
        let b = redis::RedisBackend::open(&r.url(), "t:vault:").unwrap();
        backends.push(("redis", Arc::new(b)));
    }
    Site {
        _dir: dir,
        _redis: redis,
        backends,
    }
}

fn vault(backend: &Arc<dyn Backend>, ring: &str, clock: &ManualClock) -> Vault {
    Vault::new(
        backend.clone(),
        KeyRing::parse(ring).unwrap(),
        Arc::new(clock.clone()),
        VaultOptions {
            lock_ttl: Duration::from_secs(5),
            lock_poll: Duration::from_millis(5),
        },
    )
}

#[tokio::test]
async fn records_are_sealed_versioned_and_removed() {
    let site = site();
    let ring = generate_line("k1").unwrap();
    let c = clock();
    for (name, backend) in &site.backends {
        let v = vault(backend, &ring, &c);
        assert_eq!(v.get("notes", "oauth:ann").await.unwrap(), None, "{name}");
        assert_eq!(
            v.put(&entry("notes", "oauth:ann", "s3cret-one"))
                .await
                .unwrap(),
            1
        );
        assert_eq!(
            v.put(&entry("notes", "oauth:ann", "s3cret-two"))
                .await
                .unwrap(),
            2
        );
        v.put(&entry("wiki", "oauth:ann", "w")).await.unwrap();
        v.put(&entry("notes", "static:ci", "n")).await.unwrap();
        let got = v.get("notes", "oauth:ann").await.unwrap().unwrap();
        assert_eq!(got.version, 2);
        assert_eq!(got.secret, entry("", "", "s3cret-two").secret);
        // At rest: no plaintext, and a seal moved to another row does not open.
        let row = backend.get("notes", "oauth:ann").await.unwrap().unwrap();
        assert!(!row.sealed.contains("s3cret"), "{name}");
        assert!(format!("{got:?}").contains("X-Api-Key") && !format!("{got:?}").contains("s3cret"));
        let mut moved = backend.get("notes", "static:ci").await.unwrap().unwrap();
        moved.sealed = row.sealed.clone();
        backend.put(moved).await.unwrap();
        assert!(matches!(
            v.get("notes", "static:ci").await,
            Err(VaultError::Seal { .. })
        ));
        assert!(
            v.set_state("notes", "oauth:ann", State::NeedsReconnect)
                .await
                .unwrap()
        );
        let listed = v.list("oauth:ann").await.unwrap();
        assert_eq!(
            listed
                .iter()
                .map(|s| (s.route.as_str(), s.state))
                .collect::<Vec<_>>(),
            [("notes", State::NeedsReconnect), ("wiki", State::Connected)]
        );
        assert!(v.remove("wiki", "oauth:ann").await.unwrap());
        assert!(!v.remove("wiki", "oauth:ann").await.unwrap());
        assert_eq!(v.retain_routes(&["wiki"]).await.unwrap(), 2, "{name}");
        v.put(&entry("wiki", "oauth:ann", "w")).await.unwrap();
        assert_eq!(backend.remove_person("oauth:ann").await.unwrap(), 1);
        assert!(v.list("oauth:ann").await.unwrap().is_empty());
    }
}

#[tokio::test]
async fn links_and_flows_are_single_use_and_expire() {
    let site = site();
    let ring = generate_line("k1").unwrap();
    let c = clock();
    for (name, backend) in &site.backends {
        let v = vault(backend, &ring, &c);
        let grant = LinkGrant {
            route: "notes".into(),
            person: "static:ci".into(),
            principal_kind: AuthKind::Static,
            subject: "ci".into(),
        };
        let token = v
            .issue_link(&grant, Duration::from_secs(600))
            .await
            .unwrap();
        assert!(token.len() >= 43);
        assert_eq!(v.take_link("wrong").await.unwrap(), None);
        assert_eq!(
            v.take_link(&token).await.unwrap(),
            Some(grant.clone()),
            "{name}"
        );
        assert_eq!(
            v.take_link(&token).await.unwrap(),
            None,
            "{name}: single use"
        );
        let flow = Flow {
            route: "notes".into(),
            person: "static:ci".into(),
            pkce_verifier: "v".repeat(43),
            redirect_uri: "https://g/connect/notes/callback".into(),
            client_id: "c".into(),
            extra: serde_json::json!({"browser": "h"}),
        };
        v.put_flow("state-1", &flow, Duration::from_secs(600))
            .await
            .unwrap();
        assert_eq!(v.take_flow("state-1").await.unwrap(), Some(flow.clone()));
        assert_eq!(v.take_flow("state-1").await.unwrap(), None);
        // A link is not a flow: the kinds are kept apart.
        let t2 = v
            .issue_link(&grant, Duration::from_secs(600))
            .await
            .unwrap();
        assert_eq!(v.take_flow(&t2).await.unwrap(), None);
        if *name == "sqlite" {
            // Expiry by the injected clock (redis expires by its own).
            v.put_flow("state-2", &flow, Duration::from_secs(1))
                .await
                .unwrap();
            c.advance(Duration::from_secs(2));
            assert_eq!(v.take_flow("state-2").await.unwrap(), None);
        }
    }
}

#[tokio::test]
async fn rekey_reseals_under_the_new_key() {
    let site = site();
    let old = generate_line("old").unwrap();
    let new = generate_line("new").unwrap();
    let c = clock();
    for (name, backend) in &site.backends {
        let before = vault(backend, &old, &c);
        before.put(&entry("notes", "oauth:ann", "a")).await.unwrap();
        before.put(&entry("notes", "oauth:bob", "b")).await.unwrap();
        let both = vault(backend, &format!("{new}\n{old}"), &c);
        assert_eq!(both.rekey().await.unwrap(), 2, "{name}");
        assert_eq!(both.rekey().await.unwrap(), 0, "{name}: nothing left");
        let after = vault(backend, &new, &c);
        let got = after.get("notes", "oauth:bob").await.unwrap().unwrap();
        assert_eq!(got.secret, entry("", "", "b").secret);
        assert!(before.get("notes", "oauth:ann").await.is_err());
        backend.remove_person("oauth:ann").await.unwrap();
        backend.remove_person("oauth:bob").await.unwrap();
    }
}

#[tokio::test]
async fn a_ring_that_does_not_open_the_stored_records_is_named_at_start() {
    let site = site();
    let old = generate_line("old").unwrap();
    let other = generate_line("other").unwrap();
    let c = clock();
    for (name, backend) in &site.backends {
        let sealed = vault(backend, &old, &c);
        assert_eq!(sealed.check_ring().await.unwrap(), 0, "{name}: empty");
        sealed.put(&entry("notes", "oauth:ann", "a")).await.unwrap();
        assert_eq!(sealed.check_ring().await.unwrap(), 1, "{name}");
        let e = vault(backend, &other, &c).check_ring().await.unwrap_err();
        let said = e.to_string();
        assert!(
            said.starts_with("the vault key ring opens 0 of the 1 stored credentials (route \"notes\": sealed under key \"old\", which the key ring does not hold)"),
            "{name}: {said}"
        );
        // The old key as a later line opens them again.
        let both = vault(backend, &format!("{other}\n{old}"), &c);
        assert_eq!(both.check_ring().await.unwrap(), 1, "{name}");
        backend.remove_person("oauth:ann").await.unwrap();
    }
}

/// Many callers, on two vaults (two gateways) over one store, find the token stale at once:
/// one refresh is made, every caller gets its result.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_refresh_is_made_once_across_vaults() {
    let site = site();
    let ring = generate_line("k1").unwrap();
    let c = clock();
    for (name, backend) in &site.backends {
        let a = Arc::new(vault(backend, &ring, &c));
        let b = Arc::new(vault(backend, &ring, &c));
        a.put(&oauth("notes", "oauth:ann", "old")).await.unwrap();
        let calls = Arc::new(AtomicUsize::new(0));
        let mut tasks = Vec::new();
        for i in 0..16 {
            let v = if i % 2 == 0 { a.clone() } else { b.clone() };
            let calls = calls.clone();
            tasks.push(tokio::spawn(async move {
                let stale =
                    |e: &Entry| matches!(&e.secret, Secret::OAuth(t) if t.access_token == "old");
                v.refresh_with("notes", "oauth:ann", stale, |e: Entry| async move {
                    calls.fetch_add(1, Ordering::SeqCst);
                    tokio::task::yield_now().await;
                    Ok::<_, String>(Entry {
                        secret: Secret::OAuth(OAuthTokens {
                            access_token: "new".into(),
                            refresh_token: Some("r-new".into()),
                            expires_at_ms: Some(99),
                            scope: None,
                            client_id: "c".into(),
                        }),
                        ..e
                    })
                })
                .await
                .unwrap()
            }));
        }
        let mut made = 0;
        for t in tasks {
            let r = t.await.unwrap();
            assert!(matches!(&r.entry.secret, Secret::OAuth(t) if t.access_token == "new"));
            made += usize::from(r.refreshed);
        }
        assert_eq!(calls.load(Ordering::SeqCst), 1, "{name}: one refresh");
        assert_eq!(made, 1);
        let (sa, sb) = (a.stats(), b.stats());
        assert_eq!(sa.refreshed + sb.refreshed, 1);
        assert_eq!(sa.joined + sb.joined, 15, "{name}");
        // A failed refresh releases the lock and says why.
        a.put(&oauth("notes", "oauth:ann", "old")).await.unwrap();
        let err = a
            .refresh_with(
                "notes",
                "oauth:ann",
                |_| true,
                |_| async { Err::<Entry, _>("revoked") },
            )
            .await
            .unwrap_err();
        assert!(matches!(err, RefreshError::Refresh("revoked")));
        let ok = b
            .refresh_with("notes", "oauth:ann", |_| true, |e| async { Ok::<_, ()>(e) })
            .await
            .unwrap();
        assert!(ok.refreshed, "{name}: the lock was released");
        assert!(matches!(
            a.refresh_with("none", "oauth:ann", |_| true, |e| async { Ok::<_, ()>(e) })
                .await,
            Err(RefreshError::Missing)
        ));
        backend.remove_person("oauth:ann").await.unwrap();
    }
}

#[test]
fn the_newest_connected_person_of_a_route_comes_first() {
    let row = |route: &str, person: &str, connected_ms: u64, state: State| Row {
        route: route.into(),
        person: person.into(),
        state,
        connected_ms,
        refreshed_ms: None,
        expires_at_ms: None,
        version: 1,
        sealed: String::new(),
    };
    let rows = vec![
        row("search", "static:old", 10, State::Connected),
        row("search", "static:new", 30, State::Connected),
        row("search", "static:stale", 40, State::NeedsReconnect),
        row("other", "static:elsewhere", 50, State::Connected),
        row("search", "oauth:mid", 20, State::Connected),
    ];
    assert_eq!(
        newest_connected(rows, "search"),
        ["static:new", "oauth:mid", "static:old"]
    );
}
