//! The one conformance suite every `Store` backend must pass (run against SQLite and redis).

#![allow(clippy::unwrap_used, clippy::expect_used)]

use super::{NewGrant, Rotation, Store};
use crate::model::*;

const NOW: u64 = 1_800_000_000;

/// A rotation of `old_hash` at `now` to the successor pair, as `rotate_refresh` takes it.
pub(crate) fn rotation<'a>(
    old_hash: &'a str,
    now: u64,
    access: &'a AccessRecord,
    refresh: &'a RefreshRecord,
) -> Rotation<'a> {
    Rotation {
        old_hash,
        now,
        access,
        refresh,
    }
}

/// A grant with its first token pair, as `redeem_code` and `create_grant` take it.
pub(crate) fn issue<'a>(
    grant: &'a GrantRecord,
    access: &'a AccessRecord,
    refresh: &'a RefreshRecord,
) -> NewGrant<'a> {
    NewGrant {
        grant,
        access,
        refresh,
    }
}

pub(crate) fn user(name: &str) -> UserRecord {
    UserRecord {
        username: name.into(),
        password_hash: "$argon2id$x".into(),
        created_at: NOW,
        updated_at: NOW,
        external: None,
        admin: false,
    }
}

pub(crate) fn client(id: &str, used: u64) -> ClientRecord {
    ClientRecord {
        client_id: id.into(),
        secret_hash: Some("ab".repeat(32)),
        auth_method: AuthMethod::ClientSecretPost,
        redirect_uris: vec!["https://claude.ai/api/mcp/auth_callback".into()],
        client_name: Some("Claude".into()),
        metadata: serde_json::json!({"client_name": "Claude"}),
        created_at: used,
        last_used_at: used,
    }
}

pub(crate) fn grant(fam: &str, client: &str, user: &str) -> GrantRecord {
    GrantRecord {
        family_id: fam.into(),
        client_id: client.into(),
        username: user.into(),
        scopes: vec!["mcp:read".into()],
        resource: "https://gw.example/mcp".into(),
        created_at: NOW,
        last_used_at: NOW,
        expires_at: NOW + 1000,
        revoked_at: None,
        granted_by: GrantedBy::Consent,
    }
}

pub(crate) fn access(hash: &str, g: &GrantRecord) -> AccessRecord {
    AccessRecord {
        token: TokenRecord {
            token_hash: hash.into(),
            family_id: g.family_id.clone(),
            client_id: g.client_id.clone(),
            username: g.username.clone(),
            scopes: g.scopes.clone(),
            resource: g.resource.clone(),
            issued_at: NOW,
            expires_at: NOW + 100,
        },
        revoked: false,
    }
}

pub(crate) fn refresh(hash: &str, g: &GrantRecord, expires: u64) -> RefreshRecord {
    RefreshRecord {
        token: TokenRecord {
            token_hash: hash.into(),
            family_id: g.family_id.clone(),
            client_id: g.client_id.clone(),
            username: g.username.clone(),
            scopes: g.scopes.clone(),
            resource: g.resource.clone(),
            issued_at: NOW,
            expires_at: expires,
        },
        rotated_at: None,
    }
}

/// Runs every check against `store`, which must be empty.
pub(crate) async fn run<S: Store>(store: &S) {
    server_key(store).await;
    users(store).await;
    clients(store).await;
    codes(store).await;
    grants_and_rotation(store).await;
    resource_per_grant(store).await;
    revocation_cascades(store).await;
    sessions(store).await;
    enterprise(store).await;
    rename(store).await;
}

/// Renaming a user (the migration of `ISSUER#SUBJECT` names) carries every record that names
/// them: the grant, its tokens, codes, login sessions and identity links; a taken name is not
/// overwritten.
async fn rename<S: Store>(s: &S) {
    let old = "https://idp.example#s-ren";
    let mut u = user(old);
    u.external = Some(ExternalIdentity {
        issuer: "https://idp.example".into(),
        subject: "s-ren".into(),
        email: Some("ren@example.com".into()),
        ..Default::default()
    });
    assert!(s.create_user(&u).await.unwrap());
    let g = grant("fam-ren", "c-ren", old);
    let (a, r) = (access("a-ren", &g), refresh("r-ren", &g, NOW + 1000));
    s.create_grant(issue(&g, &a, &r)).await.unwrap();
    let code = CodeRecord {
        code_hash: "code-ren".into(),
        client_id: "c-ren".into(),
        username: old.into(),
        redirect_uri: "https://claude.ai/api/mcp/auth_callback".into(),
        redirect_uri_explicit: true,
        code_challenge: "x".into(),
        scopes: vec!["mcp:read".into()],
        resource: "https://gw.example/mcp".into(),
        family_id: "fam-ren-2".into(),
        issued_at: NOW,
        expires_at: NOW + 60,
        used: false,
    };
    s.put_code(&code).await.unwrap();
    let session = SessionRecord {
        session_hash: "sh-ren".into(),
        username: Some(old.into()),
        created_at: NOW,
        expires_at: NOW + 600,
        oidc: None,
    };
    s.put_session(&session).await.unwrap();
    s.link_identity("id-ren", old).await.unwrap();
    assert!(s.create_user(&user("taken@example.com")).await.unwrap());

    assert!(
        !s.rename_user(old, "taken@example.com", NOW).await.unwrap(),
        "taken"
    );
    assert!(!s.rename_user("nobody", "x@example.com", NOW).await.unwrap());
    assert!(
        s.rename_user(old, "ren@example.com", NOW + 1)
            .await
            .unwrap()
    );
    assert!(s.get_user(old).await.unwrap().is_none());
    let renamed = s.get_user("ren@example.com").await.unwrap().unwrap();
    assert_eq!(renamed.external, u.external);
    let users = s.list_users().await.unwrap();
    assert!(users.iter().all(|u| u.username != old));
    let name = "ren@example.com";
    let new = Some(name);
    assert_eq!(
        s.get_grant("fam-ren").await.unwrap().unwrap().username,
        name
    );
    assert_eq!(
        s.get_access("a-ren").await.unwrap().unwrap().0.username,
        name
    );
    assert_eq!(
        s.get_refresh("r-ren").await.unwrap().unwrap().username,
        name
    );
    assert_eq!(
        s.get_code("code-ren").await.unwrap().unwrap().username,
        name
    );
    assert_eq!(
        s.get_session("sh-ren")
            .await
            .unwrap()
            .unwrap()
            .username
            .as_deref(),
        new
    );
    assert_eq!(s.linked_user("id-ren").await.unwrap().as_deref(), new);
    assert_eq!(
        s.get_user("taken@example.com").await.unwrap().unwrap(),
        user("taken@example.com")
    );
}

/// The enterprise grant's records: an access-only grant (shown as enterprise, revocable), a
/// one-time assertion id, identity links, the admin flag and batched last use.
async fn enterprise<S: Store>(s: &S) {
    let g = GrantRecord {
        granted_by: GrantedBy::Enterprise {
            issuer: "https://idp.example".into(),
        },
        ..grant("fam-ent", "c-ent", "erin")
    };
    s.create_access_grant(&g, &access("ent-a0", &g))
        .await
        .unwrap();
    let stored = s.get_grant("fam-ent").await.unwrap().unwrap();
    assert_eq!(stored.granted_by, g.granted_by);
    assert!(s.get_refresh("ent-a0").await.unwrap().is_none());
    assert_eq!(
        s.get_access("ent-a0").await.unwrap().map(|(_, r)| r),
        Some(false)
    );
    s.touch_grants(&[("fam-ent".into(), NOW + 50), ("no-such".into(), NOW + 50)])
        .await
        .unwrap();
    s.touch_grants(&[("fam-ent".into(), NOW + 10)])
        .await
        .unwrap();
    let touched = s.get_grant("fam-ent").await.unwrap().unwrap();
    assert_eq!(
        touched.last_used_at,
        NOW + 50,
        "last use only moves forward"
    );
    assert!(s.revoke_grant("fam-ent", NOW).await.unwrap());
    assert_eq!(
        s.get_access("ent-a0").await.unwrap().map(|(_, r)| r),
        Some(true)
    );

    assert!(s.spend_assertion("jti-1", NOW + 300, NOW).await.unwrap());
    assert!(
        !s.spend_assertion("jti-1", NOW + 300, NOW).await.unwrap(),
        "spent once"
    );
    assert!(s.spend_assertion("jti-2", NOW + 300, NOW).await.unwrap());

    assert_eq!(s.linked_user("idp-sub").await.unwrap(), None);
    s.link_identity("idp-sub", "erin").await.unwrap();
    assert_eq!(
        s.linked_user("idp-sub").await.unwrap().as_deref(),
        Some("erin")
    );

    assert!(s.create_user(&user("erin")).await.unwrap());
    assert!(s.set_admin("erin", true, NOW + 1).await.unwrap());
    assert!(s.get_user("erin").await.unwrap().unwrap().admin);
    assert!(!s.set_admin("nobody", true, NOW).await.unwrap());
}

async fn server_key<S: Store>(s: &S) {
    let k1 = s.server_key([7; 32]).await.unwrap();
    let k2 = s.server_key([9; 32]).await.unwrap();
    assert_eq!(k1, [7; 32]);
    assert_eq!(k2, [7; 32], "first writer wins");
}

async fn users<S: Store>(s: &S) {
    assert!(s.create_user(&user("bob")).await.unwrap());
    assert!(s.create_user(&user("alice")).await.unwrap());
    assert!(
        !s.create_user(&user("bob")).await.unwrap(),
        "duplicate refused"
    );
    assert!(s.set_password("bob", "$argon2id$y", NOW + 5).await.unwrap());
    assert!(!s.set_password("nobody", "$argon2id$y", NOW).await.unwrap());
    let bob = s.get_user("bob").await.unwrap().unwrap();
    assert_eq!(bob.password_hash, "$argon2id$y");
    assert_eq!(bob.updated_at, NOW + 5);
    let names: Vec<_> = s
        .list_users()
        .await
        .unwrap()
        .into_iter()
        .map(|u| u.username)
        .collect();
    assert_eq!(names, ["alice", "bob"]);
    let external = UserRecord {
        username: "https://idp.example#42".into(),
        password_hash: String::new(),
        external: Some(crate::model::ExternalIdentity {
            provider: "corp".into(),
            issuer: "https://idp.example".into(),
            subject: "42".into(),
            email: Some("carol@example.com".into()),
            groups: vec!["eng".into()],
            ..Default::default()
        }),
        ..user("x")
    };
    assert!(!s.update_user(&external).await.unwrap(), "no such user yet");
    assert!(s.create_user(&external).await.unwrap());
    let mut moved = external.clone();
    if let Some(e) = moved.external.as_mut() {
        e.groups = vec!["ops".into()];
    }
    assert!(s.update_user(&moved).await.unwrap());
    assert_eq!(s.get_user(&external.username).await.unwrap(), Some(moved));
    assert!(s.delete_user(&external.username, NOW).await.unwrap());
    assert!(s.delete_user("alice", NOW).await.unwrap());
    assert!(!s.delete_user("alice", NOW).await.unwrap());
    assert!(s.get_user("alice").await.unwrap().is_none());
}

async fn clients<S: Store>(s: &S) {
    s.create_client(&client("c-old", NOW - 100)).await.unwrap();
    s.create_client(&client("c-new", NOW)).await.unwrap();
    assert_eq!(
        s.get_client("c-new").await.unwrap().unwrap(),
        client("c-new", NOW)
    );
    assert!(s.get_client("c-none").await.unwrap().is_none());
    assert_eq!(s.clients_unused_since(NOW - 50).await.unwrap(), ["c-old"]);
    s.touch_client("c-old", NOW + 10).await.unwrap();
    s.touch_client("c-old", NOW).await.unwrap(); // never moves back
    s.touch_client("c-none", NOW).await.unwrap(); // no-op
    assert_eq!(
        s.get_client("c-old").await.unwrap().unwrap().last_used_at,
        NOW + 10
    );
    assert!(s.clients_unused_since(NOW - 50).await.unwrap().is_empty());
    assert!(s.get_client("c-none").await.unwrap().is_none());
    let ids: Vec<_> = s
        .list_clients()
        .await
        .unwrap()
        .into_iter()
        .map(|c| c.client_id)
        .collect();
    assert_eq!(ids, ["c-new", "c-old"]);
    assert!(s.delete_client("c-old", NOW).await.unwrap());
    assert!(!s.delete_client("c-old", NOW).await.unwrap());
}

async fn codes<S: Store>(s: &S) {
    let code = CodeRecord {
        code_hash: "h1".into(),
        client_id: "c-new".into(),
        username: "bob".into(),
        redirect_uri: "https://claude.ai/api/mcp/auth_callback".into(),
        redirect_uri_explicit: true,
        code_challenge: "x".repeat(43),
        scopes: vec!["mcp:read".into()],
        resource: "https://gw.example/mcp".into(),
        family_id: "fam-code".into(),
        issued_at: NOW,
        expires_at: NOW + 60,
        used: false,
    };
    s.put_code(&code).await.unwrap();
    assert_eq!(s.get_code("h1").await.unwrap().unwrap(), code);
    let g = grant("fam-code", "c-new", "bob");
    let (a, r) = (access("code-a", &g), refresh("code-r", &g, NOW + 1000));
    assert!(
        s.redeem_code("h1", issue(&g, &a, &r)).await.unwrap(),
        "first use redeems"
    );
    assert_eq!(s.get_grant("fam-code").await.unwrap().unwrap(), g);
    assert_eq!(s.get_access("code-a").await.unwrap().unwrap(), (a, false));
    let (a2, r2) = (access("code-a2", &g), refresh("code-r2", &g, NOW + 1000));
    assert!(
        !s.redeem_code("h1", issue(&g, &a2, &r2)).await.unwrap(),
        "second use does not"
    );
    assert!(
        s.get_access("code-a2").await.unwrap().is_none(),
        "no second pair"
    );
    assert!(s.get_code("h1").await.unwrap().unwrap().used);
    let gm = grant("fam-missing", "c-new", "bob");
    assert!(
        !s.redeem_code(
            "missing",
            issue(&gm, &access("m-a", &gm), &refresh("m-r", &gm, NOW))
        )
        .await
        .unwrap()
    );
    assert!(s.get_grant("fam-missing").await.unwrap().is_none());
    code_race(s).await;
}

/// Concurrent redemptions of one code: exactly one wins, and every loser finds the winner's
/// grant already there, so revoking it (what a replay does) kills the winner's tokens.
async fn code_race<S: Store>(s: &S) {
    for round in 0..20 {
        let fam = format!("race-fam-{round}");
        let code = CodeRecord {
            code_hash: format!("race-{round}"),
            family_id: fam.clone(),
            used: false,
            ..s.get_code("h1").await.unwrap().unwrap()
        };
        s.put_code(&code).await.unwrap();
        let g = grant(&fam, "c-new", "bob");
        let attempt = |i: usize| {
            let g = g.clone();
            let hash = code.code_hash.clone();
            async move {
                let a = access(&format!("race-a-{round}-{i}"), &g);
                let r = refresh(&format!("race-r-{round}-{i}"), &g, NOW + 1000);
                let won = s.redeem_code(&hash, issue(&g, &a, &r)).await.unwrap();
                // A loser is a replay: it revokes the grant at once.
                let revoked = !won && s.revoke_grant(&g.family_id, NOW + 1).await.unwrap();
                (won, revoked, a.token.token_hash)
            }
        };
        let results = tokio::join!(attempt(0), attempt(1), attempt(2), attempt(3));
        let results = [results.0, results.1, results.2, results.3];
        let winners: Vec<_> = results.iter().filter(|r| r.0).collect();
        assert_eq!(
            winners.len(),
            1,
            "round {round}: exactly one redemption wins"
        );
        assert!(
            results.iter().any(|r| r.1),
            "round {round}: a loser found the grant to revoke"
        );
        let (_, grant_revoked) = s.get_access(&winners[0].2).await.unwrap().unwrap();
        assert!(
            grant_revoked,
            "round {round}: the winner's tokens do not survive"
        );
    }
}

async fn grants_and_rotation<S: Store>(s: &S) {
    let before = s.list_grants().await.unwrap().len();
    let g = grant("fam1", "c-new", "bob");
    let (a0, r0) = (access("a0", &g), refresh("r0", &g, NOW + 1000));
    s.create_grant(issue(&g, &a0, &r0)).await.unwrap();
    assert_eq!(s.get_grant("fam1").await.unwrap().unwrap(), g);
    assert_eq!(
        s.get_access("a0").await.unwrap().unwrap(),
        (a0.clone(), false)
    );
    assert_eq!(s.get_refresh("r0").await.unwrap().unwrap(), r0);
    assert!(s.get_access("nope").await.unwrap().is_none());

    let (a1, r1) = (access("a1", &g), refresh("r1", &g, NOW + 2000));
    assert_eq!(
        s.rotate_refresh(rotation("r0", NOW + 5, &a1, &r1))
            .await
            .unwrap(),
        RotateOutcome::Rotated
    );
    assert_eq!(
        s.rotate_refresh(rotation(
            "r0",
            NOW + 6,
            &access("a2", &g),
            &refresh("r2", &g, NOW)
        ))
        .await
        .unwrap(),
        RotateOutcome::AlreadyRotated {
            rotated_at: NOW + 5
        }
    );
    assert!(
        s.get_access("a2").await.unwrap().is_none(),
        "no successor stored on reuse"
    );
    assert_eq!(
        s.get_refresh("r0").await.unwrap().unwrap().rotated_at,
        Some(NOW + 5)
    );
    assert_eq!(s.get_refresh("r1").await.unwrap().unwrap().rotated_at, None);
    assert!(s.get_access("a1").await.unwrap().is_some());
    let g1 = s.get_grant("fam1").await.unwrap().unwrap();
    assert_eq!((g1.last_used_at, g1.expires_at), (NOW + 5, NOW + 2000));
    assert_eq!(
        s.rotate_refresh(rotation("missing", NOW, &a1, &r1))
            .await
            .unwrap(),
        RotateOutcome::NotFound
    );

    assert!(s.revoke_access("a1").await.unwrap());
    assert!(!s.revoke_access("nope").await.unwrap());
    assert!(s.get_access("a1").await.unwrap().unwrap().0.revoked);

    assert!(s.revoke_grant("fam1", NOW + 7).await.unwrap());
    assert!(
        !s.revoke_grant("fam1", NOW + 8).await.unwrap(),
        "already revoked"
    );
    assert_eq!(
        s.get_grant("fam1").await.unwrap().unwrap().revoked_at,
        Some(NOW + 7)
    );
    assert!(
        s.get_access("a0").await.unwrap().unwrap().1,
        "grant revoked shows on access"
    );
    assert_eq!(
        s.rotate_refresh(rotation(
            "r1",
            NOW + 9,
            &access("a3", &g),
            &refresh("r3", &g, NOW)
        ))
        .await
        .unwrap(),
        RotateOutcome::FamilyRevoked
    );
    assert_eq!(s.list_grants().await.unwrap().len(), before + 1);
}

/// Two grants of one user and client for two resources: each record keeps its own resource,
/// also across rotation (a grant's tokens are bound to its resource).
async fn resource_per_grant<S: Store>(s: &S) {
    let a = GrantRecord {
        resource: "https://gw.example/a/mcp".into(),
        ..grant("fam-a", "c-res", "carol")
    };
    let b = GrantRecord {
        resource: "https://gw.example/b/mcp".into(),
        ..grant("fam-b", "c-res", "carol")
    };
    for g in [&a, &b] {
        let tag = &g.family_id;
        let (at, rt) = (
            access(&format!("{tag}-a0"), g),
            refresh(&format!("{tag}-r0"), g, NOW + 1000),
        );
        s.create_grant(issue(g, &at, &rt)).await.unwrap();
    }
    let (a1, r1) = (access("fam-b-a1", &b), refresh("fam-b-r1", &b, NOW + 2000));
    assert_eq!(
        s.rotate_refresh(rotation("fam-b-r0", NOW + 1, &a1, &r1))
            .await
            .unwrap(),
        RotateOutcome::Rotated
    );
    for (g, tokens) in [
        (&a, ["fam-a-a0", "fam-a-r0"]),
        (&b, ["fam-b-a1", "fam-b-r1"]),
    ] {
        assert_eq!(
            s.get_grant(&g.family_id).await.unwrap().unwrap().resource,
            g.resource
        );
        assert_eq!(
            s.get_access(tokens[0]).await.unwrap().unwrap().0.resource,
            g.resource
        );
        assert_eq!(
            s.get_refresh(tokens[1]).await.unwrap().unwrap().resource,
            g.resource
        );
    }
    let mut listed: Vec<String> = s
        .list_grants()
        .await
        .unwrap()
        .into_iter()
        .filter(|g| g.client_id == "c-res")
        .map(|g| g.resource)
        .collect();
    listed.sort();
    assert_eq!(listed, [a.resource.clone(), b.resource.clone()]);
}

async fn revocation_cascades<S: Store>(s: &S) {
    s.create_client(&client("c-x", NOW)).await.unwrap();
    assert!(s.create_user(&user("carol")).await.unwrap());
    let g2 = grant("fam2", "c-x", "carol");
    let g3 = grant("fam3", "c-new", "carol");
    let g4 = grant("fam4", "c-new", "bob");
    s.create_grant(issue(
        &g2,
        &access("b2", &g2),
        &refresh("s2", &g2, NOW + 1000),
    ))
    .await
    .unwrap();
    s.create_grant(issue(
        &g3,
        &access("b3", &g3),
        &refresh("s3", &g3, NOW + 1000),
    ))
    .await
    .unwrap();
    s.create_grant(issue(
        &g4,
        &access("b4", &g4),
        &refresh("s4", &g4, NOW + 1000),
    ))
    .await
    .unwrap();

    assert!(s.delete_client("c-x", NOW).await.unwrap());
    assert!(
        s.get_access("b2").await.unwrap().unwrap().1,
        "client removal revokes its grants"
    );
    assert!(!s.get_access("b3").await.unwrap().unwrap().1);

    assert!(s.delete_user("carol", NOW).await.unwrap());
    assert!(
        s.get_access("b3").await.unwrap().unwrap().1,
        "user removal revokes their grants"
    );
    assert!(
        !s.get_access("b4").await.unwrap().unwrap().1,
        "others untouched"
    );

    // purge removes what is past its expiry, keeps the rest
    s.purge_expired(NOW + 50).await.unwrap();
    assert!(s.get_grant("fam4").await.unwrap().is_some());
}

async fn sessions<S: Store>(s: &S) {
    let sess = SessionRecord {
        session_hash: "sh".into(),
        username: None,
        created_at: NOW,
        expires_at: NOW + 600,
        oidc: None,
    };
    s.put_session(&sess).await.unwrap();
    assert_eq!(s.get_session("sh").await.unwrap().unwrap(), sess);
    let logged = SessionRecord {
        username: Some("bob".into()),
        ..sess.clone()
    };
    s.put_session(&logged).await.unwrap();
    assert_eq!(
        s.get_session("sh")
            .await
            .unwrap()
            .unwrap()
            .username
            .as_deref(),
        Some("bob")
    );
    s.delete_session("sh").await.unwrap();
    assert!(s.get_session("sh").await.unwrap().is_none());
}
