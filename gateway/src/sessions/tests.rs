//! Tests of the session bindings through [`Sessions`], on both backends.

use std::{sync::Arc, time::Duration};

use pforte_clock::ManualClock;

use super::redis::{decode, encode};
use super::*;

/// A holder whose person is itself (one client per person).
fn h(owner: &str) -> Holder<'_> {
    Holder::new(owner, owner)
}

#[tokio::test]
async fn local_backend_with_a_fake_clock() {
    let clock = ManualClock::at(Duration::from_secs(1_000));
    let sessions = Sessions::local(
        Arc::new(clock.clone()),
        SessionOptions {
            ttl: Duration::from_secs(60),
            max_entries: 2,
        },
    );
    assert_eq!(
        sessions
            .bind("s1", h("alice"), None)
            .await
            .unwrap()
            .ownership,
        Ownership::Owner
    );
    assert_eq!(
        sessions.check("s1", h("bob")).await.unwrap().ownership,
        Ownership::Foreign
    );
    clock.advance(Duration::from_secs(59));
    assert_eq!(
        sessions.check("s1", h("alice")).await.unwrap().ownership,
        Ownership::Owner
    );
    clock.advance(Duration::from_secs(60));
    assert_eq!(
        sessions.check("s1", h("alice")).await.unwrap().ownership,
        Ownership::Unknown
    );
    sessions.bind("s2", h("a"), None).await.unwrap();
    sessions.bind("s3", h("a"), None).await.unwrap();
    sessions.bind("s4", h("a"), None).await.unwrap();
    assert_eq!(
        sessions.check("s2", h("a")).await.unwrap().ownership,
        Ownership::Unknown
    );
    assert_eq!(
        sessions.check("s4", h("a")).await.unwrap().ownership,
        Ownership::Owner
    );
    sessions.forget("s4", h("a")).await.unwrap();
    assert_eq!(
        sessions.check("s4", h("a")).await.unwrap().ownership,
        Ownership::Unknown
    );
}

#[tokio::test]
async fn redis_counts_sessions_per_owner() {
    let Some(redis) = pforte_test_support::RedisServer::start() else {
        return;
    };
    let sessions = Sessions::redis(&redis.url(), "t:", SessionOptions::default()).unwrap();
    assert_eq!(sessions.count("alice").await.unwrap(), 0);
    for id in ["s1", "s2", "s3"] {
        assert_eq!(
            sessions.bind(id, h("alice"), None).await.unwrap().ownership,
            Ownership::Owner
        );
    }
    assert_eq!(
        sessions
            .bind("s1", h("alice"), None)
            .await
            .unwrap()
            .ownership,
        Ownership::Owner
    );
    assert_eq!(
        sessions.bind("s1", h("bob"), None).await.unwrap().ownership,
        Ownership::Foreign
    );
    assert_eq!(sessions.count("alice").await.unwrap(), 3);
    assert_eq!(sessions.count("bob").await.unwrap(), 0);
    // Bob cannot release Alice's session.
    sessions.forget("s2", h("bob")).await.unwrap();
    assert_eq!(
        sessions.check("s2", h("alice")).await.unwrap().ownership,
        Ownership::Owner
    );
    sessions.forget("s2", h("alice")).await.unwrap();
    assert_eq!(sessions.count("alice").await.unwrap(), 2);
    assert_eq!(
        sessions.check("s2", h("alice")).await.unwrap().ownership,
        Ownership::Unknown
    );
}

#[test]
fn records_encode_owner_and_instance_and_old_records_decode_as_owner_alone() {
    let owner = "oauth:alice:client-1";
    let url = "http://10.0.0.2:8080/mcp";
    assert_eq!(decode(&encode(owner, Some(url))), (owner, Some(url)));
    assert_eq!(decode(&encode(owner, None)), (owner, None));
    // A record written before instances were kept is the owner alone.
    assert_eq!(decode("static:ci:ci"), ("static:ci:ci", None));
    assert_eq!(decode("o\n"), ("o", None));
    // Split at the last newline: an owner with one still reads back.
    assert_eq!(decode(&encode("a\nb", Some(url))), ("a\nb", Some(url)));
    assert!(is_storable(url));
    assert!(!is_storable(""));
    assert!(!is_storable("http://x/\n"));
}

#[tokio::test]
async fn an_unstorable_instance_is_not_recorded() {
    let sessions = Sessions::local(
        Arc::new(ManualClock::at(Duration::from_secs(1))),
        SessionOptions::default(),
    );
    assert_eq!(
        sessions.bind("s", h("a"), Some("bad\nurl")).await.unwrap(),
        Binding::owner(None)
    );
}

#[tokio::test]
async fn redis_keeps_the_instance_for_every_gateway_and_reads_old_records() {
    let Some(redis) = pforte_test_support::RedisServer::start() else {
        return;
    };
    let opts = SessionOptions {
        ttl: Duration::from_secs(100),
        ..SessionOptions::default()
    };
    // Two gateways on one redis.
    let one = Sessions::redis(&redis.url(), "t:", opts.clone()).unwrap();
    let two = Sessions::redis(&redis.url(), "t:", opts).unwrap();
    let url = "http://127.0.0.1:9001/mcp";
    assert_eq!(
        one.bind("s1", h("alice"), Some(url)).await.unwrap(),
        Binding::owner(Some(url.into()))
    );
    assert_eq!(
        two.check("s1", h("alice")).await.unwrap(),
        Binding::owner(Some(url.into()))
    );
    assert_eq!(two.check("s1", h("bob")).await.unwrap(), Binding::FOREIGN);
    // The first binding wins on the other gateway too.
    assert_eq!(
        two.bind("s1", h("alice"), Some("http://127.0.0.1:9002/mcp"))
            .await
            .unwrap(),
        Binding::owner(Some(url.into()))
    );
    assert_eq!(
        two.bind("s1", h("bob"), Some(url)).await.unwrap(),
        Binding::FOREIGN
    );
    assert_eq!(one.count("alice").await.unwrap(), 1);

    let Backend::Redis(r) = &one.backend else {
        unreachable!()
    };
    let client = ::redis::Client::open(redis.url()).unwrap();
    let mut conn = client.get_multiplexed_async_connection().await.unwrap();
    // The record is one key with the session's TTL; an owner's use slides it (ttl/4).
    let ttl: i64 = ::redis::cmd("TTL")
        .arg(r.key("s1"))
        .query_async(&mut conn)
        .await
        .unwrap();
    assert!((90..=100).contains(&ttl), "{ttl}");
    let _: () = ::redis::cmd("EXPIRE")
        .arg(r.key("s1"))
        .arg(50)
        .query_async(&mut conn)
        .await
        .unwrap();
    assert_eq!(
        one.check("s1", h("bob")).await.unwrap(),
        Binding::FOREIGN,
        "a foreign check does not slide"
    );
    let ttl: i64 = ::redis::cmd("TTL")
        .arg(r.key("s1"))
        .query_async(&mut conn)
        .await
        .unwrap();
    assert!(ttl <= 50, "{ttl}");
    assert_eq!(
        one.check("s1", h("alice")).await.unwrap(),
        Binding::owner(Some(url.into()))
    );
    let ttl: i64 = ::redis::cmd("TTL")
        .arg(r.key("s1"))
        .query_async(&mut conn)
        .await
        .unwrap();
    assert!(ttl > 90, "slid: {ttl}");

    // A record from before instances were kept: the owner alone.
    let _: () = ::redis::cmd("SET")
        .arg(r.key("old"))
        .arg("alice")
        .arg("EX")
        .arg(100)
        .query_async(&mut conn)
        .await
        .unwrap();
    assert_eq!(
        two.check("old", h("alice")).await.unwrap(),
        Binding::owner(None)
    );
    assert_eq!(two.check("old", h("bob")).await.unwrap(), Binding::FOREIGN);
    assert_eq!(
        two.bind("old", h("alice"), Some(url)).await.unwrap(),
        Binding::owner(None)
    );

    // Forget compares the owner part: only the owner removes a record with an instance.
    one.forget("s1", h("bob")).await.unwrap();
    assert_eq!(
        two.check("s1", h("alice")).await.unwrap().ownership,
        Ownership::Owner
    );
    two.forget("s1", h("alice")).await.unwrap();
    assert_eq!(one.check("s1", h("alice")).await.unwrap(), Binding::UNKNOWN);
    assert_eq!(one.count("alice").await.unwrap(), 0);
}

#[tokio::test]
async fn redis_down_is_an_error() {
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let sessions = Sessions::redis(
        &format!("redis://127.0.0.1:{port}/0"),
        "t:",
        SessionOptions::default(),
    )
    .unwrap();
    assert!(sessions.check("s", h("a")).await.is_err());
    assert!(sessions.bind("s", h("a"), None).await.is_err());
}

/// Issue 36 point 5, on both backends: at the cap the least recently used session that is not
/// in use is closed (its next use is Unknown: 404); one in use is never; all in use: no room.
async fn make_room_spares_sessions_in_use(sessions: Arc<Sessions>, advance: impl Fn()) {
    for id in ["s1", "s2", "s3"] {
        sessions.bind(id, h("alice"), None).await.unwrap();
        advance();
    }
    // s1 has a call in flight; s2 is then the least recently used idle one.
    let call = sessions.in_use("s1", h("alice"));
    assert!(sessions.make_room(h("alice"), 3).await.unwrap());
    assert_eq!(
        sessions.check("s2", h("alice")).await.unwrap(),
        Binding::UNKNOWN
    );
    assert_eq!(
        sessions.check("s1", h("alice")).await.unwrap().ownership,
        Ownership::Owner
    );
    assert_eq!(sessions.count("alice").await.unwrap(), 2);
    // Under the cap nothing is closed.
    assert!(sessions.make_room(h("alice"), 3).await.unwrap());
    assert_eq!(sessions.count("alice").await.unwrap(), 2);
    // Everything in use: no room, nothing closed.
    let stream = sessions.in_use("s3", h("alice"));
    assert!(!sessions.make_room(h("alice"), 2).await.unwrap());
    assert_eq!(sessions.count("alice").await.unwrap(), 2);
    drop(stream);
    assert!(sessions.make_room(h("alice"), 2).await.unwrap());
    assert_eq!(
        sessions.check("s3", h("alice")).await.unwrap(),
        Binding::UNKNOWN
    );
    drop(call);
    assert!(sessions.busy().is_empty(), "guards released");
    // Another person's sessions are never closed for alice.
    sessions.bind("b1", h("bob"), None).await.unwrap();
    assert!(sessions.make_room(h("alice"), 1).await.unwrap());
    assert_eq!(sessions.count("bob").await.unwrap(), 1);
    assert_eq!(sessions.count("alice").await.unwrap(), 0);
}

#[tokio::test]
async fn local_make_room_closes_the_least_recently_used_idle_session() {
    let clock = ManualClock::at(Duration::from_secs(1_000));
    let sessions = Arc::new(Sessions::local(
        Arc::new(clock.clone()),
        SessionOptions::default(),
    ));
    make_room_spares_sessions_in_use(sessions, || clock.advance(Duration::from_millis(10))).await;
}

#[tokio::test]
async fn redis_make_room_closes_the_least_recently_used_idle_session() {
    let Some(redis) = pforte_test_support::RedisServer::start() else {
        return;
    };
    let sessions =
        Arc::new(Sessions::redis(&redis.url(), "t:", SessionOptions::default()).unwrap());
    // redis's clock has seconds: a second between binds orders them.
    make_room_spares_sessions_in_use(sessions, || {
        std::thread::sleep(Duration::from_millis(1_050));
    })
    .await;
}

/// Issue 36 point 6: the records in `sessions.db` outlive the process — owner, person,
/// instance, expiry; a forgotten or evicted one stays gone.
#[tokio::test(flavor = "multi_thread", worker_threads = 1)]
async fn embedded_records_outlive_a_reopen() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("sessions.db");
    let clock = ManualClock::at(Duration::from_secs(1_000));
    let opts = SessionOptions {
        ttl: Duration::from_secs(600),
        ..SessionOptions::default()
    };
    let url = "http://127.0.0.1:9001/mcp";
    {
        let one = Sessions::embedded(&path, Arc::new(clock.clone()), opts.clone()).unwrap();
        one.bind("s1", h("alice"), Some(url)).await.unwrap();
        one.bind("s2", h("alice"), None).await.unwrap();
        one.bind("s3", h("bob"), None).await.unwrap();
        one.forget("s2", h("alice")).await.unwrap();
        // A slide is written off the request's path.
        clock.advance(Duration::from_secs(300));
        one.check("s3", h("bob")).await.unwrap();
    }
    // The off-path write has landed once the pool ran it (bounded wait).
    let mut slid = false;
    for _ in 0..100 {
        let c = rusqlite::Connection::open(&path).unwrap();
        let exp: i64 = c
            .query_row(
                "SELECT expires_ms FROM sessions WHERE person = 'bob'",
                [],
                |r| r.get(0),
            )
            .unwrap();
        if exp == 1_300_000 + 600_000 {
            slid = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert!(slid, "the slid expiry was written");
    let two = Sessions::embedded(&path, Arc::new(clock.clone()), opts.clone()).unwrap();
    assert_eq!(
        two.check("s1", h("alice")).await.unwrap(),
        Binding::owner(Some(url.into()))
    );
    assert_eq!(two.check("s1", h("bob")).await.unwrap(), Binding::FOREIGN);
    assert_eq!(two.check("s2", h("alice")).await.unwrap(), Binding::UNKNOWN);
    assert_eq!(two.count("alice").await.unwrap(), 1);
    drop(two);
    // Past every expiry (the latest, slid at 1300 s, ends at 1900 s) nothing is read back.
    clock.advance(Duration::from_secs(700));
    let three = Sessions::embedded(&path, Arc::new(clock.clone()), opts).unwrap();
    assert_eq!(three.live_local(), Some(0));
    assert_eq!(
        pforte_oauth::mode_of(&path).unwrap(),
        0o600,
        "the records are the owner's only"
    );
}

/// `is_bound` (a virtual server's sweep): bound, then not once forgotten or expired, and the look
/// itself slides no expiry — on both backends.
#[tokio::test]
async fn is_bound_looks_without_sliding_the_expiry() {
    let clock = ManualClock::at(Duration::from_secs(1_000));
    let opts = SessionOptions {
        ttl: Duration::from_secs(60),
        max_entries: 10,
    };
    let sessions = Sessions::local(Arc::new(clock.clone()), opts);
    sessions.bind("s1", h("alice"), None).await.unwrap();
    sessions.bind("s2", h("alice"), None).await.unwrap();
    assert!(sessions.is_bound("s1").await.unwrap());
    assert!(!sessions.is_bound("nope").await.unwrap());
    sessions.forget("s2", h("alice")).await.unwrap();
    assert!(!sessions.is_bound("s2").await.unwrap());
    clock.advance(Duration::from_secs(59));
    assert!(sessions.is_bound("s1").await.unwrap());
    clock.advance(Duration::from_secs(1));
    assert!(
        !sessions.is_bound("s1").await.unwrap(),
        "not slid by the looks"
    );

    let Some(redis) = pforte_test_support::RedisServer::start() else {
        return;
    };
    let sessions = Sessions::redis(&redis.url(), "b:", SessionOptions::default()).unwrap();
    sessions.bind("r1", h("alice"), None).await.unwrap();
    assert!(sessions.is_bound("r1").await.unwrap());
    sessions.forget("r1", h("alice")).await.unwrap();
    assert!(!sessions.is_bound("r1").await.unwrap());
    assert!(!sessions.is_bound("never").await.unwrap());
}
