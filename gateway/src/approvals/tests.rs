//! The approvals' decisions and the embedded store.
#![allow(clippy::unwrap_used)]

use super::*;

fn approval(id: &str, digest: &str, created: u64) -> Approval {
    Approval {
        id: id.into(),
        person: "oauth:ann".into(),
        name: "ann".into(),
        client: "Claude".into(),
        route: "files".into(),
        tool: "delete".into(),
        arguments: r#"{"path":"a"}"#.into(),
        digest: digest.into(),
        rule: "approve-deletes".into(),
        message: "Deletes need a second person.".into(),
        created_ms: created,
        expires_ms: created + 1000,
        state: State::Pending,
        decided_by: None,
        decided_ms: None,
    }
}

#[test]
fn the_digest_binds_route_tool_arguments_and_person() {
    let a = digest("files", "delete", r#"{"path":"a"}"#, "oauth:ann");
    assert_eq!(a.len(), 64);
    assert_eq!(a, digest("files", "delete", r#"{"path":"a"}"#, "oauth:ann"));
    assert_ne!(a, digest("files", "delete", r#"{"path":"b"}"#, "oauth:ann"));
    assert_ne!(a, digest("files", "delete", r#"{"path":"a"}"#, "oauth:bob"));
    assert_ne!(a, digest("other", "delete", r#"{"path":"a"}"#, "oauth:ann"));
    // Length prefixes: moving a character between parts changes the digest.
    assert_ne!(digest("ab", "c", "", ""), digest("a", "bc", "", ""));
}

#[test]
fn arguments_are_canonical_whatever_their_order() {
    let one = br#"{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"t","arguments":{"b":1,"a":[2,{"y":1,"x":2}]}}}"#;
    let two = br#"{"jsonrpc":"2.0","id":9,"method":"tools/call","params":{"arguments":{"a":[2,{"x":2,"y":1}],"b":1},"name":"t"}}"#;
    assert_eq!(canonical_arguments(one), canonical_arguments(two));
    assert_eq!(
        canonical_arguments(one).unwrap(),
        r#"{"a":[2,{"x":2,"y":1}],"b":1}"#
    );
    let none = br#"{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"t"}}"#;
    assert_eq!(canonical_arguments(none).unwrap(), "{}");
}

#[test]
fn ids_have_one_shape() {
    let id = new_id([0xab; 16]);
    assert_eq!(id.len(), 36);
    assert!(id.starts_with("apr_abab"));
}

#[test]
fn a_call_asks_waits_passes_once_or_is_refused() {
    let mut a = approval("apr_1", "d", 100);
    assert_eq!(standing(None, 0), Standing::Ask);
    assert_eq!(standing(Some(&a), 500), Standing::Waiting);
    assert_eq!(
        standing(Some(&a), 1100),
        Standing::Refused(Refusal::Expired)
    );
    let approved = decide(&a, Decision::Approve, "root", 500, 2000).unwrap();
    assert_eq!(approved.expires_ms, 2500, "the retry has a fresh ttl");
    assert_eq!(standing(Some(&approved), 2000), Standing::Approved);
    assert_eq!(
        standing(Some(&approved), 2500),
        Standing::Refused(Refusal::Expired)
    );
    assert!(decide(&approved, Decision::Reject, "root", 600, 10).is_none());
    let rejected = decide(&a, Decision::Reject, "root", 500, 2000).unwrap();
    assert_eq!(
        standing(Some(&rejected), 600),
        Standing::Refused(Refusal::Rejected)
    );
    a.state = State::Used;
    assert_eq!(standing(Some(&a), 500), Standing::Ask);
    a.state = State::Closed;
    assert_eq!(standing(Some(&a), 500), Standing::Ask);
    // Too late to decide.
    assert!(decide(&approval("apr_2", "d", 0), Decision::Approve, "r", 1000, 10).is_none());
}

#[test]
fn nobody_approves_their_own_call() {
    let a = approval("apr_1", "d", 100);
    assert!(own_call(&a, "ann"));
    assert!(!own_call(&a, "bob"));
    let token = Approval {
        person: "static:ann".into(),
        ..a
    };
    assert!(
        !own_call(&token, "ann"),
        "a static token is not the user ann"
    );
}

#[test]
fn the_ttl_is_validated() {
    assert!(ApprovalsConfig::default().problem().is_none());
    assert_eq!(ApprovalsConfig::default().ttl_secs, 900);
    assert!(ApprovalsConfig { ttl_secs: 0 }.problem().is_some());
    assert!(ApprovalsConfig { ttl_secs: 86_401 }.problem().is_some());
}

#[test]
fn the_embedded_store_keeps_them_and_uses_each_once() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("pforte.db");
    let store = embedded(&path).unwrap();
    let a = approval("apr_1", "d", 100);
    store.insert(&a, 100).unwrap();
    store.insert(&approval("apr_2", "d", 200), 200).unwrap();
    assert_eq!(store.latest("d").unwrap().unwrap().id, "apr_2");
    assert_eq!(store.get("apr_1").unwrap().unwrap(), a);
    assert_eq!(store.list().unwrap().len(), 2);
    let approved = decide(&a, Decision::Approve, "root", 150, 1000).unwrap();
    assert!(
        store
            .transition(&approved, State::Pending, Some(150))
            .unwrap()
    );
    assert!(
        !store
            .transition(&approved, State::Pending, Some(150))
            .unwrap(),
        "decided once"
    );
    let used = Approval {
        state: State::Used,
        ..approved.clone()
    };
    assert!(
        !store
            .transition(&used, State::Approved, Some(1150))
            .unwrap(),
        "expired"
    );
    assert!(store.transition(&used, State::Approved, Some(200)).unwrap());
    assert!(
        !store.transition(&used, State::Approved, Some(200)).unwrap(),
        "used once"
    );
    drop(store);
    // A restart keeps them; a day after expiry they are swept.
    let store = embedded(&path).unwrap();
    assert_eq!(store.get("apr_1").unwrap().unwrap().state, State::Used);
    store
        .insert(&approval("apr_3", "e", 0), 2_000 + KEEP_MS)
        .unwrap();
    let left: Vec<String> = store.list().unwrap().into_iter().map(|a| a.id).collect();
    assert_eq!(left, ["apr_3"]);
}
