//! Enterprise-Managed Authorization end to end: a test identity provider (a real HTTP server on
//! 127.0.0.1 serving its metadata and JWKS, `pforte_tests::TestIdp`) signs ID-JAGs; a client
//! registered like Claude exchanges one at the gateway's token endpoint with the `jwt-bearer`
//! grant and calls a tool with the access token. Wrong `typ`, wrong `aud`, expired, replayed
//! (also at a second gateway on the same redis), unknown issuer, another client's `client_id`
//! and an email domain that may not create users are each refused with `invalid_grant` and a
//! description that names the reason.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use pforte_clock::{Clock, SystemClock};
use pforte_tests::{
    Enterprise, McpService, OAuth, RedisServer, Stack, StackBuilder, TestIdp,
    oauth::{
        Browser, Discovered, Registered, TokenAnswer, discover, post_form, register_like_claude,
    },
};
use serde_json::{Value, json};

const JWT_BEARER: &str = "urn:ietf:params:oauth:grant-type:jwt-bearer";

fn with_idp(builder: StackBuilder, idp: &TestIdp) -> StackBuilder {
    builder.oauth(OAuth::default().enterprise(Enterprise {
        issuer: idp.issuer.clone(),
        allowed_domains: vec!["example.com".into()],
        ..Enterprise::default()
    }))
}

/// Presents `assertion` with `client`'s credentials at the token endpoint.
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

/// The answer is a 400 `invalid_grant` whose description contains `needle`.
fn refused(answer: &TokenAnswer, needle: &str) {
    assert_eq!(answer.status, 400, "{}", answer.body);
    assert_eq!(answer.error(), Some("invalid_grant"), "{}", answer.body);
    let why = answer.body["error_description"]
        .as_str()
        .unwrap_or_default();
    assert!(why.contains(needle), "{why:?} should mention {needle:?}");
}

fn now() -> u64 {
    SystemClock.now_secs()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_id_jag_is_exchanged_for_a_token_that_calls_a_tool_and_bad_ones_are_invalid_grant() {
    let idp = TestIdp::start().await.unwrap();
    let gw = with_idp(Stack::builder(), &idp).start().await;
    let browser = Browser::for_gateway(&gw);
    let d = discover(&browser.http, &gw.mcp_url()).await.unwrap();
    let grants = d.as_meta["grant_types_supported"].as_array().unwrap();
    assert!(grants.contains(&json!(JWT_BEARER)), "{grants:?}");
    let client = register_like_claude(&browser.http, &d).await.unwrap();
    let other = register_like_claude(&browser.http, &d).await.unwrap();
    let claims = |sub: &str, email: &str| {
        idp.claims(&gw.base, &client.client_id, &d.resource, sub, email, now())
    };

    // A good ID-JAG: an access token, no refresh token, the IdP's scopes.
    let jag = idp.id_jag(&claims("u-alice", "alice@example.com")).unwrap();
    let ok = exchange(&browser.http, &d, &client, &jag).await;
    let token = ok.access().unwrap();
    assert!(ok.body.get("refresh_token").is_none(), "{}", ok.body);
    assert_eq!(ok.body["scope"], "mcp:read mcp:write");
    let mut mcp = gw.mcp(&token);
    mcp.open().await.unwrap();
    let call = mcp.call_tool("whoami", json!({})).await;
    assert_eq!(call.status(), 200);
    let text = call.text().await.unwrap();
    assert!(text.contains("alice@example.com"), "{text}");

    // The same subject again is the same (linked) user, also without an email.
    let mut again = claims("u-alice", "");
    again.as_object_mut().unwrap().remove("email");
    let second = exchange(&browser.http, &d, &client, &idp.id_jag(&again).unwrap()).await;
    assert_eq!(second.status, 200, "{}", second.body);

    // Replayed.
    refused(
        &exchange(&browser.http, &d, &client, &jag).await,
        "already used",
    );
    // Wrong typ.
    let plain = idp
        .sign(&claims("u-alice", "alice@example.com"), "JWT")
        .unwrap();
    refused(&exchange(&browser.http, &d, &client, &plain).await, "typ");
    // Wrong aud.
    let mut c = claims("u-alice", "alice@example.com");
    c["aud"] = json!("https://another-server.example");
    refused(
        &exchange(&browser.http, &d, &client, &idp.id_jag(&c).unwrap()).await,
        "aud",
    );
    // Expired.
    let mut c = claims("u-alice", "alice@example.com");
    c["iat"] = json!(now() - 1000);
    c["exp"] = json!(now() - 700);
    refused(
        &exchange(&browser.http, &d, &client, &idp.id_jag(&c).unwrap()).await,
        "expired",
    );
    // Unknown issuer (signed by the same key, but not listed).
    let mut c = claims("u-alice", "alice@example.com");
    c["iss"] = json!("https://idp.unknown.example");
    refused(
        &exchange(&browser.http, &d, &client, &idp.id_jag(&c).unwrap()).await,
        "not a trusted identity provider",
    );
    // Issued to another client.
    let mut c = claims("u-alice", "alice@example.com");
    c["client_id"] = json!(other.client_id);
    refused(
        &exchange(&browser.http, &d, &client, &idp.id_jag(&c).unwrap()).await,
        "another client",
    );
    // A new user of a domain that may not create users.
    let c = claims("u-mallory", "mallory@elsewhere.org");
    refused(
        &exchange(&browser.http, &d, &client, &idp.id_jag(&c).unwrap()).await,
        "may not create users",
    );
    // Not a JWT at all.
    refused(
        &exchange(&browser.http, &d, &client, "not-a-jwt").await,
        "not a signed JWT",
    );

    // The user was created on first use, and the grants show how they came about.
    let users = gw.admin_cmd(&["user", "list", "--json"], "").unwrap();
    assert!(users.contains("alice@example.com"), "{users}");
    let grants: Value =
        serde_json::from_str(&gw.admin_cmd(&["grant", "list", "--json"], "").unwrap()).unwrap();
    assert_eq!(grants.as_array().map(Vec::len), Some(2), "{grants}");
    assert!(
        grants
            .as_array()
            .unwrap()
            .iter()
            .all(|g| g["granted_by"] == "enterprise"),
        "{grants}"
    );
    eprintln!(
        "enterprise grants: 2 issued, 8 refusals (replay, typ, aud, expired, issuer, client, domain, not a JWT)"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_id_jag_used_at_one_gateway_is_refused_at_another_on_the_same_redis() {
    let Some(redis) = RedisServer::start() else {
        return;
    };
    let idp = TestIdp::start().await.unwrap();
    let svc = McpService::start(&[]).unwrap();
    let gateway = || {
        with_idp(
            Stack::builder()
                .upstream(&svc.url())
                .redis_url(&redis.url()),
            &idp,
        )
    };
    let gw_a = gateway().start().await;
    let gw_b = gateway().public_url(&gw_a.base).start().await;
    let (http_a, http_b) = (
        Browser::for_gateway(&gw_a).http,
        Browser::for_gateway(&gw_b).http,
    );
    let d_a = discover(&http_a, &gw_a.mcp_url()).await.unwrap();
    let client = register_like_claude(&http_a, &d_a).await.unwrap();
    let claims = idp.claims(
        &gw_a.base,
        &client.client_id,
        &d_a.resource,
        "u-bob",
        "bob@example.com",
        now(),
    );
    let jag = idp.id_jag(&claims).unwrap();
    let first = exchange(&http_a, &d_a, &client, &jag).await;
    let token = first.access().unwrap();
    // B refuses the replay (the jti is spent in redis) but accepts A's token.
    // B's metadata names the shared public URL (A's port here); B's own token endpoint:
    let mut d_b_at_b = d_a.clone();
    d_b_at_b.as_meta["token_endpoint"] = json!(format!("{}/token", gw_b.base));
    refused(
        &exchange(&http_b, &d_b_at_b, &client, &jag).await,
        "already used",
    );
    let mut mcp = gw_b.mcp(&token);
    mcp.open().await.unwrap();
}

/// The IdP rotates its key: the next ID-JAG names a key id the gateway has not seen, and the
/// gateway fetches the JWKS again (at most every 2 s per issuer) and accepts it. An IdP whose
/// keys cannot be fetched gets an `invalid_grant` that says so, not a 500.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rotated_key_is_fetched_and_an_unreachable_idp_is_named() {
    let idp = TestIdp::start().await.unwrap();
    let down = format!("http://127.0.0.1:{}", pforte_tests::free_port());
    let gw = Stack::builder()
        .oauth(
            OAuth::default()
                .enterprise(Enterprise {
                    issuer: idp.issuer.clone(),
                    allowed_domains: vec!["example.com".into()],
                    ..Enterprise::default()
                })
                .enterprise(Enterprise {
                    issuer: down.clone(),
                    jwks_uri: Some(format!("{down}/jwks.json")),
                    ..Enterprise::default()
                }),
        )
        .start()
        .await;
    let browser = Browser::for_gateway(&gw);
    let d = discover(&browser.http, &gw.mcp_url()).await.unwrap();
    let client = register_like_claude(&browser.http, &d).await.unwrap();
    let claims = || {
        idp.claims(
            &gw.base,
            &client.client_id,
            &d.resource,
            "u-carol",
            "carol@example.com",
            now(),
        )
    };
    exchange(&browser.http, &d, &client, &idp.id_jag(&claims()).unwrap())
        .await
        .access()
        .unwrap();

    idp.rotate().unwrap();
    let rotated = idp.id_jag(&claims()).unwrap();
    let started = std::time::Instant::now();
    let accepted = pforte_tests::eventually(std::time::Duration::from_secs(5), || {
        let (http, d, client, jag) = (
            browser.http.clone(),
            d.clone(),
            client.clone(),
            rotated.clone(),
        );
        async move { exchange(&http, &d, &client, &jag).await.status == 200 }
    })
    .await;
    assert!(accepted, "the rotated key was not fetched within 5 s");
    eprintln!("rotated key accepted after {:?}", started.elapsed());

    let mut c = claims();
    c["iss"] = json!(down);
    let answer = exchange(&browser.http, &d, &client, &idp.id_jag(&c).unwrap()).await;
    refused(&answer, "could not be fetched");
}
