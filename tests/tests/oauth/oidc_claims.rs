//! Claims the way providers send them, against the real `oidc-provider` in four profiles:
//! claims in the ID token; claims only from UserInfo (the library's default,
//! `conformIdTokenClaims`, OIDC Core §5.4); groups only from UserInfo; no `email_verified`
//! (Entra-like: refused with a page naming `trust_email`, admitted with `email_claim` and
//! `trust_email = true`). Whatever the profile, the person is then known by their email:
//! `whoami`, the audit line of their tool call, `pforte grant list --user`, `pforte user role`.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::BTreeMap;

use pforte_tests::{IdpProfile, IdpUser, rmcp_client, whoami};

use crate::oidc_login::{World, users};

/// ann (example.com, group eng) is admitted by her domain, gus (partner.org, group
/// mcp-users) only by his group: both signing in shows the email and the groups were read.
async fn both_sign_in(w: &mut World, profile: IdpProfile) {
    let (_, _, auth) = w.authorize("mcp:read", None).await;
    let consent = w.sign_in(&auth, "ann").await.unwrap();
    assert_eq!(consent.status, 200, "{profile:?}: {}", consent.body);
    assert!(consent.body.contains("ann@example.com"), "{}", consent.body);
    w.new_browser();
    let (_, _, auth) = w.authorize("mcp:read", None).await;
    let page = w.sign_in(&auth, "gus").await.unwrap();
    assert_eq!(
        page.status, 200,
        "{profile:?}: gus by his group: {}",
        page.body
    );
    let list = w.gw.admin_cmd(&["user", "list"], "").unwrap();
    for name in ["ann@example.com", "gus@partner.org"] {
        assert!(list.contains(name), "{profile:?}: {list}");
    }
    assert!(!list.contains('#'), "{profile:?}: readable names: {list}");
}

#[tokio::test]
async fn claims_are_read_from_the_id_token_or_userinfo_whichever_carries_them() {
    for profile in [
        IdpProfile::IdToken,
        IdpProfile::UserInfo,
        IdpProfile::GroupsFromUserInfo,
    ] {
        let Some(mut w) =
            World::start_with(&users(), profile, |_| {}, |b, _, oauth| b.oauth(oauth)).await
        else {
            return;
        };
        both_sign_in(&mut w, profile).await;
        println!("profile {profile:?}: ann (by domain) and gus (by group) signed in");
    }
}

fn entra_users() -> BTreeMap<String, IdpUser> {
    [(
        "ann".to_owned(),
        IdpUser::new("ann@example.com", false, &["eng"])
            .never_verified()
            .claim("preferred_username", "Ann@Example.com"),
    )]
    .into_iter()
    .collect()
}

#[tokio::test]
async fn a_provider_without_email_verified_needs_trust_email_and_the_page_says_so() {
    let Some(w) = World::start_with(
        &entra_users(),
        IdpProfile::IdToken,
        |_| {},
        |b, _, oauth| b.oauth(oauth),
    )
    .await
    else {
        return;
    };
    let (_, _, auth) = w.authorize("mcp:read", None).await;
    let page = w.sign_in(&auth, "ann").await.unwrap();
    assert_eq!(page.status, 403, "{}", page.body);
    for needle in [
        "Your Test IdP account ann@example.com may not sign in here: its email address is not verified by the provider",
        "the operator of this gateway can set trust_email = true",
    ] {
        assert!(page.body.contains(needle), "{needle:?} in {}", page.body);
    }
    drop(w);

    let Some(w) = World::start_with(
        &entra_users(),
        IdpProfile::IdToken,
        |p| {
            p.email_claim = Some("preferred_username".into());
            p.trust_email = true;
            p.scopes = ["openid", "profile", "groups"].map(String::from).to_vec();
        },
        |b, _, oauth| b.oauth(oauth),
    )
    .await
    else {
        return;
    };
    let (client, pkce, auth) = w.authorize("mcp:read", None).await;
    let consent = w.sign_in(&auth, "ann").await.unwrap();
    assert_eq!(consent.status, 200, "{}", consent.body);
    let token = w.approve(&consent, &client, &pkce).await.unwrap();
    let mcp = rmcp_client(&w.gw.mcp_url(), w.gw.http(), &token, &[])
        .await
        .unwrap();
    let me = whoami(&mcp).await;
    assert_eq!(me["subject"], "ann@example.com", "{me}");
}

#[tokio::test]
async fn an_sso_person_is_known_by_their_email_in_headers_audit_and_cli() {
    let Some(w) = World::start_with(
        &users(),
        IdpProfile::UserInfo,
        |_| {},
        |b, _, oauth| b.oauth(oauth),
    )
    .await
    else {
        return;
    };
    let (client, pkce, auth) = w.authorize("mcp:read mcp:write", None).await;
    let consent = w.sign_in(&auth, "ann").await.unwrap();
    let token = w.approve(&consent, &client, &pkce).await.unwrap();
    let mcp = rmcp_client(&w.gw.mcp_url(), w.gw.http(), &token, &[])
        .await
        .unwrap();
    let me = whoami(&mcp).await;
    assert_eq!(me["subject"], "ann@example.com", "{me}");
    drop(mcp);

    let role =
        w.gw.admin_cmd(&["user", "role", "ann@example.com", "admin"], "")
            .unwrap();
    assert!(role.contains("is now an admin"), "{role}");
    let grants =
        w.gw.admin_cmd(
            &["grant", "list", "--user", "ann@example.com", "--json"],
            "",
        )
        .unwrap();
    let grants: serde_json::Value = serde_json::from_str(&grants).unwrap();
    assert_eq!(grants.as_array().map(Vec::len), Some(1), "{grants}");
    let list = w.gw.admin_cmd(&["user", "list", "--json"], "").unwrap();
    let list: serde_json::Value = serde_json::from_str(&list).unwrap();
    let ann = &list[0];
    assert_eq!(ann["username"], "ann@example.com", "{list}");
    assert_eq!(ann["origin"], "oidc");
    assert_eq!(ann["subject"], "ann", "issuer + subject kept as the link");
    assert_eq!(ann["role"], "admin");
    assert_eq!(ann["password_changed_at"], serde_json::Value::Null);

    let calls = pforte_tests::eventually(std::time::Duration::from_secs(5), || async {
        std::fs::read_to_string(w.gw.data_dir().join("audit.jsonl"))
            .unwrap_or_default()
            .contains("\"subject\":\"ann@example.com\"")
    })
    .await;
    assert!(calls, "the tool call's audit line names ann@example.com");
}
