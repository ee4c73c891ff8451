//! One account per person across sign-in paths, with the real `oidc-provider` for sign-in and
//! the test enterprise IdP's key for ID-JAGs: an ID-JAG with the provider's own issuer and the
//! person's subject lands on the user their sign-in made (and the other way round: a person
//! first seen in an ID-JAG keeps that user when they sign in); an ID-JAG from another issuer
//! joins by verified email only when that issuer's `allowed_domains` list the domain; users
//! from a provider or an enterprise grant show their origin and no password.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use pforte_clock::{Clock, SystemClock};
use pforte_tests::{
    Enterprise, IdpProfile, IdpUser, JagIdp,
    oauth::{Discovered, Registered, TokenAnswer, post_form, register_like_claude},
};
use serde_json::{Value, json};

use crate::oidc_login::{World, users};

const JWT_BEARER: &str = "urn:ietf:params:oauth:grant-type:jwt-bearer";

async fn exchange(
    http: &reqwest::Client,
    d: &Discovered,
    client: &Registered,
    assertion: &str,
) -> TokenAnswer {
    let mut form = vec![
        ("grant_type", JWT_BEARER),
        ("assertion", assertion),
        ("client_id", client.client_id.as_str()),
    ];
    if let Some(s) = &client.client_secret {
        form.push(("client_secret", s));
    }
    post_form(http, &d.endpoint("token_endpoint").unwrap(), &form)
        .await
        .unwrap()
}

fn user_list(w: &World) -> Vec<Value> {
    let out = w.gw.admin_cmd(&["user", "list", "--json"], "").unwrap();
    serde_json::from_str::<Value>(&out)
        .unwrap()
        .as_array()
        .cloned()
        .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sign_in_and_enterprise_grants_land_on_one_user_per_person() {
    let jag = JagIdp::start().await.unwrap();
    let jwks = format!("{}/jwks.json", jag.issuer);
    let other_issuer = jag.issuer.clone();
    let mut people = users();
    people.insert("lea".into(), IdpUser::new("lea@example.com", true, &[]));
    let Some(mut w) = World::start_with(
        &people,
        IdpProfile::IdToken,
        |_| {},
        |b, sso, oauth| {
            b.oauth(
                oauth
                    // The sign-in provider also issues ID-JAGs (its own issuer; the test key).
                    .enterprise(Enterprise {
                        issuer: sso.to_owned(),
                        jwks_uri: Some(jwks),
                        allowed_domains: vec!["example.com".into()],
                        ..Enterprise::default()
                    })
                    // Another IdP that speaks for example.com only.
                    .enterprise(Enterprise {
                        issuer: other_issuer,
                        allowed_domains: vec!["example.com".into()],
                        ..Enterprise::default()
                    }),
            )
        },
    )
    .await
    else {
        return;
    };
    let sso = w.idp.issuer.clone();
    let now = SystemClock.now_secs();
    let client = register_like_claude(&w.browser.http, &w.d).await.unwrap();
    let (base, resource) = (w.gw.base.clone(), w.d.resource.clone());
    let id_jag = |iss: &str, sub: &str, email: &str| {
        let mut c = jag.claims(&base, &client.client_id, &resource, sub, email, now);
        c["iss"] = json!(iss);
        jag.id_jag(&c).unwrap()
    };

    // ann signs in first; then an ID-JAG of the same issuer and subject is the same user.
    let (_, _, auth) = w.authorize("mcp:read", None).await;
    assert_eq!(w.sign_in(&auth, "ann").await.unwrap().status, 200);
    let same = exchange(
        &w.browser.http,
        &w.d,
        &client,
        &id_jag(&sso, "ann", "ann@example.com"),
    )
    .await;
    assert_eq!(same.status, 200, "{}", same.body);
    // Another issuer that speaks for example.com joins her by her verified email.
    let joined = exchange(
        &w.browser.http,
        &w.d,
        &client,
        &id_jag(&jag.issuer, "u-ann-elsewhere", "ann@example.com"),
    )
    .await;
    assert_eq!(joined.status, 200, "{}", joined.body);
    // gus (partner.org) signed in; that issuer does not speak for partner.org: refused, and
    // no second gus.
    w.new_browser();
    let (_, _, auth) = w.authorize("mcp:read", None).await;
    assert_eq!(w.sign_in(&auth, "gus").await.unwrap().status, 200);
    let refused = exchange(
        &w.browser.http,
        &w.d,
        &client,
        &id_jag(&jag.issuer, "u-gus-elsewhere", "gus@partner.org"),
    )
    .await;
    assert_eq!(refused.status, 400, "{}", refused.body);
    let why = refused.body["error_description"]
        .as_str()
        .unwrap_or_default();
    assert!(why.contains("gus@partner.org"), "{why}");

    // lea is first seen in an ID-JAG: created from it, no password; her sign-in finds her.
    let first = exchange(
        &w.browser.http,
        &w.d,
        &client,
        &id_jag(&sso, "lea", "lea@example.com"),
    )
    .await;
    assert_eq!(first.status, 200, "{}", first.body);
    let lea = user_list(&w)
        .into_iter()
        .find(|u| u["username"] == "lea@example.com")
        .expect("lea");
    assert_eq!(lea["origin"], "enterprise", "{lea}");
    assert_eq!(lea["password_changed_at"], Value::Null, "{lea}");
    let table = w.gw.admin_cmd(&["user", "list"], "").unwrap();
    assert!(table.contains(&format!("enterprise {sso}")), "{table}");
    w.new_browser();
    let account = url::Url::parse(&format!("{}/account", w.gw.base)).unwrap();
    let page = w.sign_in(&account, "lea").await.unwrap();
    assert_eq!(page.status, 200, "{}", page.body);
    assert!(page.body.contains("lea@example.com"), "{}", page.body);
    assert!(
        !page.body.contains("name=\"new\""),
        "no password form: {}",
        page.body
    );

    let users = user_list(&w);
    let names: Vec<&str> = users
        .iter()
        .filter_map(|u| u["username"].as_str())
        .collect();
    assert_eq!(
        names,
        ["ann@example.com", "gus@partner.org", "lea@example.com"],
        "one user per person: {users:#?}"
    );
    let grants: Value =
        serde_json::from_str(&w.gw.admin_cmd(&["grant", "list", "--json"], "").unwrap()).unwrap();
    let anns = grants
        .as_array()
        .unwrap()
        .iter()
        .filter(|g| g["user"] == "ann@example.com" || g["username"] == "ann@example.com")
        .count();
    assert_eq!(anns, 2, "both enterprise grants are ann's: {grants:#}");
    println!("figures: 3 people, 5 arrivals (2 sign-ins + 3 ID-JAGs), 3 users, 1 refusal");
}
