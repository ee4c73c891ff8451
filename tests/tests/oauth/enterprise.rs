//! Enterprise-Managed Authorization end to end: a test identity provider (a real HTTP server on
//! 127.0.0.1 serving its metadata and JWKS, `pforte_tests::JagIdp`) signs ID-JAGs; a client
//! registered like Claude exchanges one at the gateway's token endpoint with the `jwt-bearer`
//! grant and calls a tool with the access token. Wrong `typ`, wrong `aud`, expired, replayed
//! (also at a second gateway on the same redis), unknown issuer, another client's `client_id`
//! and an email domain that may not create users are each refused with `invalid_grant` and a
//! description that names the reason.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use pforte_clock::{Clock, SystemClock};
use pforte_tests::{
    Enterprise, JagIdp, Limits, McpService, OAuth, RedisServer, Role, Route, Stack, StackBuilder,
    oauth::{
        Browser, Discovered, Registered, TokenAnswer, discover, post_form, register_like_claude,
    },
};
use serde_json::{Value, json};

const JWT_BEARER: &str = "urn:ietf:params:oauth:grant-type:jwt-bearer";

fn with_idp(builder: StackBuilder, idp: &JagIdp) -> StackBuilder {
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

/// The gateway's audit log lines of `event`, once at least `n` are written (≤ 5 s).
async fn audit_lines(gw: &pforte_tests::Gateway, event: &str, n: usize) -> Vec<Value> {
    let read = || {
        std::fs::read_to_string(gw.data_dir().join("audit.jsonl"))
            .unwrap_or_default()
            .lines()
            .filter_map(|l| serde_json::from_str::<Value>(l).ok())
            .filter(|v| v["event"] == event)
            .collect::<Vec<_>>()
    };
    pforte_tests::eventually(std::time::Duration::from_secs(5), || async {
        read().len() >= n
    })
    .await;
    read()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_id_jag_is_exchanged_for_a_token_that_calls_a_tool_and_bad_ones_are_invalid_grant() {
    let idp = JagIdp::start().await.unwrap();
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
    // Each grant and refusal is in the audit log with the client IP and the reason, and no
    // assertion or token is.
    let audit = audit_lines(&gw, "enterprise_grant", 10).await;
    let issued: Vec<_> = audit.iter().filter(|e| e["outcome"] == "issued").collect();
    let refusals: Vec<_> = audit.iter().filter(|e| e["outcome"] == "refused").collect();
    assert_eq!((issued.len(), refusals.len()), (2, 8), "{audit:#?}");
    assert!(
        audit
            .iter()
            .all(|e| e["client_ip"] == "127.0.0.1" && e["client_id"] == client.client_id.as_str()),
        "{audit:#?}"
    );
    assert_eq!(issued[0]["user"], "alice@example.com");
    assert_eq!(issued[0]["via"], idp.issuer.as_str());
    assert_eq!(issued[0]["scopes"], json!(["mcp:read", "mcp:write"]));
    assert!(
        refusals.iter().any(|e| e["reason"]
            .as_str()
            .unwrap()
            .starts_with("invalid_grant: the ID-JAG was already used")),
        "{refusals:#?}"
    );
    let log = std::fs::read_to_string(gw.data_dir().join("audit.jsonl")).unwrap();
    for secret in [jag.as_str(), token.as_str()] {
        assert!(
            !log.contains(secret),
            "an assertion or token in the audit log"
        );
    }
    eprintln!(
        "enterprise grants: 2 issued, 8 refusals (replay, typ, aud, expired, issuer, client, domain, not a JWT)"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn roles_cap_an_enterprise_grant_and_a_route_role_refuses_it() {
    let idp = JagIdp::start().await.unwrap();
    let svc = McpService::start(&[]).unwrap();
    let notes = Route {
        roles: vec!["writers".into()],
        ..Route::url("notes", &svc.url())
    };
    let oauth = OAuth::default()
        .enterprise(Enterprise {
            issuer: idp.issuer.clone(),
            allowed_domains: vec!["example.com".into()],
            ..Enterprise::default()
        })
        .role(
            "writers",
            Role {
                users: vec!["alice@example.com".into()],
                scopes: Some(vec!["mcp:read".into(), "mcp:write".into()]),
                ..Role::default()
            },
        )
        .role(
            "readers",
            Role {
                users: vec!["*".into()],
                scopes: Some(vec!["mcp:read".into()]),
                ..Role::default()
            },
        );
    let gw = Stack::builder()
        .upstream(&svc.url())
        .route(notes)
        .oauth(oauth)
        .start()
        .await;
    let browser = Browser::for_gateway(&gw);
    let d = discover(&browser.http, &gw.mcp_url()).await.unwrap();
    let client = register_like_claude(&browser.http, &d).await.unwrap();
    let jag = |resource: &str, sub: &str, email: &str| {
        let c = idp.claims(&gw.base, &client.client_id, resource, sub, email, now());
        idp.id_jag(&c).unwrap()
    };
    let notes_url = gw.route_url("notes");
    // Bob holds only `readers`: the ID-JAG's mcp:write is capped away on the open route …
    let bob = exchange(
        &browser.http,
        &d,
        &client,
        &jag(&d.resource, "u-bob", "bob@example.com"),
    )
    .await;
    assert_eq!(bob.status, 200, "{}", bob.body);
    assert_eq!(bob.body["scope"], "mcp:read");
    // … and the notes route, which requires `writers`, refuses him.
    refused(
        &exchange(
            &browser.http,
            &d,
            &client,
            &jag(&notes_url, "u-bob", "bob@example.com"),
        )
        .await,
        "may not use notes",
    );
    // Alice holds `writers`: both scopes on notes.
    let alice = exchange(
        &browser.http,
        &d,
        &client,
        &jag(&notes_url, "u-alice", "alice@example.com"),
    )
    .await;
    assert_eq!(alice.status, 200, "{}", alice.body);
    assert_eq!(alice.body["scope"], "mcp:read mcp:write");
    let audit = audit_lines(&gw, "enterprise_grant", 3).await;
    let refusal = audit.iter().find(|e| e["outcome"] == "refused").unwrap();
    assert!(
        refusal["reason"]
            .as_str()
            .unwrap()
            .contains("may not use notes"),
        "{refusal}"
    );
}

/// An IdP vouches for a verified email of its own domains only (red team 2026-12-04 L2):
/// another domain's existing user is not linked, and `email_verified: "false"` (a string) is
/// unverified.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_id_jag_links_a_local_user_only_by_a_verified_email_of_its_domains() {
    let idp = JagIdp::start().await.unwrap();
    let gw = with_idp(Stack::builder(), &idp).start().await;
    gw.add_user("carol@other.org", "carol-password-1").unwrap();
    gw.add_user("dave@example.com", "dave-password-1").unwrap();
    let browser = Browser::for_gateway(&gw);
    let d = discover(&browser.http, &gw.mcp_url()).await.unwrap();
    let client = register_like_claude(&browser.http, &d).await.unwrap();
    let claims = |sub: &str, email: &str| {
        idp.claims(&gw.base, &client.client_id, &d.resource, sub, email, now())
    };
    // Another domain's email links nobody (the rule of `person.rs`: by email only within
    // the issuer's `allowed_domains`).
    let c = claims("emp-carol", "carol@other.org");
    refused(
        &exchange(&browser.http, &d, &client, &idp.id_jag(&c).unwrap()).await,
        "does not speak for its domain",
    );
    let mut c = claims("emp-dave", "dave@example.com");
    c["email_verified"] = json!("false");
    refused(
        &exchange(&browser.http, &d, &client, &idp.id_jag(&c).unwrap()).await,
        "no verified email",
    );
    let c = claims("emp-dave", "dave@example.com");
    let ok = exchange(&browser.http, &d, &client, &idp.id_jag(&c).unwrap()).await;
    assert_eq!(ok.status, 200, "{}", ok.body);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_id_jag_used_at_one_gateway_is_refused_at_another_on_the_same_redis() {
    let Some(redis) = RedisServer::start() else {
        return;
    };
    let idp = JagIdp::start().await.unwrap();
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
    let idp = JagIdp::start().await.unwrap();
    let down = format!("http://127.0.0.1:{}", pforte_tests::free_port());
    // The wait below polls the token endpoint for up to 5 s: no rate limit in the way.
    let gw = Stack::builder()
        .limits(Limits::off())
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

/// Registration matches the metadata: with a trusted identity provider the metadata lists the
/// `jwt-bearer` grant and a client registering it is accepted (and can use it); without one
/// the metadata does not list it and registration refuses it with a description naming
/// `[[oauth.enterprise]]`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn registration_accepts_the_jwt_bearer_grant_exactly_when_the_metadata_lists_it() {
    let metadata = |grants: Value| {
        json!({
            "client_name": "Claude",
            "redirect_uris": [pforte_tests::oauth::CLAUDE_CALLBACK],
            "token_endpoint_auth_method": "client_secret_post",
            "grant_types": grants,
        })
    };
    let with_jwt = metadata(json!(["authorization_code", "refresh_token", JWT_BEARER]));

    let idp = JagIdp::start().await.unwrap();
    let gw = with_idp(Stack::builder(), &idp).start().await;
    let browser = Browser::for_gateway(&gw);
    let d = discover(&browser.http, &gw.mcp_url()).await.unwrap();
    assert!(
        d.as_meta["grant_types_supported"]
            .as_array()
            .unwrap()
            .contains(&json!(JWT_BEARER))
    );
    let client = pforte_tests::oauth::register(&browser.http, &d, &with_jwt)
        .await
        .unwrap();
    let claims = idp.claims(
        &gw.base,
        &client.client_id,
        &d.resource,
        "u-reg",
        "reg@example.com",
        now(),
    );
    let answer = exchange(&browser.http, &d, &client, &idp.id_jag(&claims).unwrap()).await;
    assert_eq!(answer.status, 200, "{}", answer.body);

    let plain = Stack::builder().oauth(OAuth::default()).start().await;
    let browser = Browser::for_gateway(&plain);
    let d = discover(&browser.http, &plain.mcp_url()).await.unwrap();
    let advertised = d.as_meta["grant_types_supported"].as_array().unwrap();
    assert!(!advertised.contains(&json!(JWT_BEARER)), "{advertised:?}");
    let resp = browser
        .http
        .post(d.endpoint("registration_endpoint").unwrap())
        .json(&with_jwt)
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 400);
    let body: Value = resp.json().await.unwrap();
    assert_eq!(body["error"], "invalid_client_metadata", "{body}");
    let why = body["error_description"].as_str().unwrap_or_default();
    assert!(why.contains("[[oauth.enterprise]]"), "{why}");
    // What the metadata lists registers.
    let listed: Vec<Value> = advertised.clone();
    pforte_tests::oauth::register(&browser.http, &d, &metadata(json!(listed)))
        .await
        .unwrap();
}
