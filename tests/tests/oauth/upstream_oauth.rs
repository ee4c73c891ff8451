//! End to end, `kind = "oauth"` routes (issue 24): the upstream is a second Pforte with OAuth
//! in front of mcp-service — a real OAuth-protected MCP server with its own authorization
//! server, short-lived access tokens and no grace for a reused refresh token — and the front
//! gateway's route brokers each user's access: the call's connect link, discovery and dynamic
//! registration, the user's sign-in and consent at the upstream (driven like a browser), the
//! callback, calls as that user (the upstream's `whoami` names two users apart), refresh before
//! expiry (twice: the rotated refresh token was kept), the grant revoked upstream → reconnect
//! prompt → reconnect; two gateways on one redis that refresh one token once; an OAuth user of
//! the front who disconnects at `/connections`, which revokes the grant upstream. The client's
//! own token never reaches the upstream (its `/metrics` counts no static credential).
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::time::{Duration, Instant};

use pforte_tests::{
    Limits, McpClient, OAuth, Prompt, RedisServer, Route, Stack, StackBuilder, UpstreamAuth,
    connect::{cimd_wrapper, log_lines, log_wrapper, metric_sum, metrics_text},
    eventually,
    oauth::{Browser, access_token_at, browser_step, param},
    rpc_answer, write_vault_key,
};
use serde_json::{Value, json};
use url::Url;

/// Where the front gateways send `/mcp`: nowhere (only their route is used).
const NOWHERE: &str = "http://127.0.0.1:9/mcp";
const NOTES: &str = "notes";
/// The upstream's access-token lifetime: the front refreshes a tenth of it before expiry.
const TTL_SECS: u64 = 15;
const ALICE_UP: &str = "alice-upstream";
const BOB_UP: &str = "bob-upstream";
const PASSWORD: &str = "upstream horse battery staple";

/// The third-party server: a TLS Pforte with OAuth in front of mcp-service, access tokens for
/// [`TTL_SECS`], a rotated refresh token presented again revoking its grant; two users.
async fn upstream() -> Stack {
    upstream_through(&[]).await
}

/// [`upstream`], started through `wrapper` (see `StackBuilder::wrapper`).
async fn upstream_through(wrapper: &[&str]) -> Stack {
    let up = Stack::builder()
        .wrapper(wrapper)
        .oauth(
            OAuth::default()
                .access_ttl_secs(TTL_SECS)
                .refresh_grace_secs(0),
        )
        .limits(Limits::off())
        .start()
        .await;
    up.add_user(ALICE_UP, PASSWORD).unwrap();
    up.add_user(BOB_UP, PASSWORD).unwrap();
    up
}

/// A plain-HTTP front gateway whose route `notes` brokers OAuth to `up` (trusting its CA).
fn front(up: &Stack, key: &std::path::Path) -> StackBuilder {
    let ca = up.cert.as_ref().expect("a TLS upstream").cert.clone();
    Stack::builder()
        .upstream(NOWHERE)
        .plain_http()
        .limits(Limits::off())
        .vault_key(key)
        .route(
            Route::url(NOTES, &up.mcp_url())
                .title("Notes")
                .ca_file(&ca)
                .upstream_auth(UpstreamAuth::oauth()),
        )
}

/// A session on the front's route with `token`.
async fn session(front: &Stack, token: &str) -> McpClient {
    let mut client = front.mcp_at(&front.route_url(NOTES), token);
    client.open().await.unwrap();
    client
}

/// `whoami` on `client`'s session: the JSON-RPC answer.
async fn call_whoami(client: &McpClient) -> Value {
    let resp = client.call_tool("whoami", json!({})).await;
    assert_eq!(resp.status(), 200, "tools/call whoami");
    rpc_answer(resp).await
}

/// `whoami`'s structured answer (panics on anything else, a connect prompt included).
async fn whoami(client: &McpClient) -> Value {
    let answer = call_whoami(client).await;
    let me = &answer["result"]["structuredContent"];
    assert!(me.is_object(), "not a whoami answer: {answer}");
    me.clone()
}

/// The connect prompt of a `whoami` call on `client`.
async fn asked(client: &McpClient) -> Prompt {
    let answer = call_whoami(client).await;
    Prompt::of(&answer).unwrap_or_else(|| panic!("not a connect prompt: {answer}"))
}

/// The browser's part of connecting: `link` (from a prompt) leads to the upstream's
/// authorization (PKCE S256, the upstream's resource, Pforte's callback); sign in as `user`
/// when asked, approve, back to the front's callback, then its "connected" page.
async fn connect(front: &Stack, up: &Stack, browser: &Browser, link: &Url, user: &str) {
    let start = browser.get(link).await.unwrap();
    let authorize = start.see_other().unwrap();
    assert!(
        authorize
            .as_str()
            .starts_with(&format!("{}/authorize?", up.base)),
        "{authorize}"
    );
    let callback = format!("{}/connect/{NOTES}/callback", front.base);
    assert_eq!(
        param(&authorize, "code_challenge_method").as_deref(),
        Some("S256")
    );
    assert_eq!(
        param(&authorize, "resource").as_deref(),
        Some(up.mcp_url().as_str())
    );
    assert_eq!(
        param(&authorize, "redirect_uri").as_deref(),
        Some(callback.as_str())
    );
    let (back, consent) = browser_step(browser, &authorize, user, PASSWORD, "approve")
        .await
        .unwrap();
    assert!(consent.contains("Pforte (Notes)"), "{consent}");
    assert!(back.as_str().starts_with(&callback), "{back}");
    let landed = browser.get(&back).await.unwrap();
    let done = browser.get(&landed.see_other().unwrap()).await.unwrap();
    assert_eq!(done.status, 200, "{}", done.body);
    assert!(done.body.contains("connected"), "{}", done.body);
}

/// The upstream's counters: refreshes, reused refresh tokens, and static credentials presented
/// on its `/mcp` (a client's token of the front would be one).
#[derive(Debug, Clone, Copy, PartialEq)]
struct Counts {
    refreshes: f64,
    reuse: f64,
    static_tokens: f64,
    oauth_ok: f64,
}

async fn counts(up: &Stack) -> Counts {
    let text = metrics_text(&up.http(), &up.base).await.unwrap();
    Counts {
        refreshes: metric_sum(&text, "pforte_oauth_events_total", &["event=\"refresh\""]),
        reuse: metric_sum(
            &text,
            "pforte_oauth_events_total",
            &["event=\"reuse_detected\""],
        ),
        static_tokens: metric_sum(&text, "pforte_auth_total", &["kind=\"static\""]),
        oauth_ok: metric_sum(
            &text,
            "pforte_auth_total",
            &["kind=\"oauth\"", "reason=\"ok\""],
        ),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_oauth_route_connects_each_user_refreshes_and_reconnects_after_a_revocation() {
    let up = upstream().await;
    let dir = tempfile::tempdir().unwrap();
    let key = write_vault_key(dir.path()).unwrap();
    let front = front(&up, &key).start().await;
    let (mut connects, mut reconnects) = (0u32, 0u32);
    let start = counts(&up).await;

    // Each user: a call → the link → consent at the upstream → calls as that upstream user.
    let mut users = Vec::new();
    for (name, up_user) in [("alice", ALICE_UP), ("bob", BOB_UP)] {
        let token = front.create_token(name).await.unwrap();
        let standin = session(&front, &token).await;
        let prompt = asked(&standin).await;
        assert!(matches!(prompt, Prompt::ToolError { .. }), "{prompt:?}");
        assert!(prompt.text().starts_with("Notes needs your account"));
        let browser = Browser::for_gateway(&up);
        connect(&front, &up, &browser, prompt.link(), up_user).await;
        connects += 1;
        let client = session(&front, &token).await;
        let me = whoami(&client).await;
        assert_eq!(me["subject"], up_user, "{me}");
        assert_eq!(me["authKind"], "oauth", "{me}");
        users.push((token, client, browser, up_user, me));
    }
    let (alice, bob) = (&users[0], &users[1]);
    assert_ne!(alice.4["subject"], bob.4["subject"]);
    // One registration at the upstream serves both users: Pforte's, not the MCP client's.
    assert_eq!(alice.4["client"], bob.4["client"]);
    assert_eq!(alice.4["clientName"], "Pforte (Notes)", "{}", alice.4);

    // Calls go on across expiry: before each access token expires the front refreshes it
    // (twice per user, so the rotated refresh token was kept), and every call answers.
    let limit = Instant::now() + Duration::from_secs(3 * TTL_SECS + 10);
    let mut calls = 0u32;
    loop {
        for (_, client, _, up_user, _) in &users {
            let me = whoami(client).await;
            assert_eq!(me["subject"], *up_user, "{me}");
            calls += 1;
        }
        let now = counts(&up).await;
        if now.refreshes - start.refreshes >= 4.0 {
            break;
        }
        assert!(Instant::now() < limit, "no 4 refreshes by now: {now:?}");
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    let refreshed = counts(&up).await;
    assert_eq!(refreshed.reuse, start.reuse, "no refresh token used twice");

    // The grant revoked upstream: once the upstream refuses the access token (its validation
    // cache holds a second), the front's one refresh is refused too and the call carries a
    // reconnect link; bob is untouched.
    let out = up
        .admin_cmd(&["grant", "revoke", "--user", ALICE_UP], "")
        .unwrap();
    println!("grant revoke: {}", out.trim());
    let limit = Instant::now() + Duration::from_secs(10);
    let reconnect = loop {
        let answer = call_whoami(&alice.1).await;
        if let Some(p) = Prompt::of(&answer) {
            break p;
        }
        assert_eq!(
            answer["result"]["structuredContent"]["subject"], ALICE_UP,
            "{answer}"
        );
        assert!(
            Instant::now() < limit,
            "no reconnect prompt after the revocation"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    assert!(reconnect.is_reconnect(), "{reconnect:?}");
    let still = asked(&alice.1).await;
    assert!(still.is_reconnect(), "{still:?}");
    assert_eq!(whoami(&bob.1).await["subject"], BOB_UP);
    // Reconnecting: the upstream still knows alice's browser, so consent is all it asks.
    connect(&front, &up, &alice.2, reconnect.link(), ALICE_UP).await;
    reconnects += 1;
    let again = session(&front, &alice.0).await;
    assert_eq!(whoami(&again).await["subject"], ALICE_UP);

    // Upstream, only the broker's OAuth tokens: not one static credential (the front's
    // clients hold static tokens) reached its /mcp.
    let end = counts(&up).await;
    assert_eq!(end.static_tokens, start.static_tokens, "{end:?}");
    assert!(end.oauth_ok > start.oauth_ok, "{end:?}");
    println!(
        "upstream_auth oauth route: connects {connects}, refreshes {}, reconnects {reconnects}, calls {calls}",
        end.refreshes - start.refreshes
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_gateways_on_one_redis_refresh_a_token_once() {
    let Some(redis) = RedisServer::start() else {
        return;
    };
    let redis_url = redis.url();
    let up = upstream().await;
    let dir = tempfile::tempdir().unwrap();
    let key = write_vault_key(dir.path()).unwrap();
    let logs = [dir.path().join("a.log"), dir.path().join("b.log")];
    let wrappers: Vec<Vec<String>> = logs.iter().map(|l| log_wrapper(l)).collect();
    let wrapper = |i: usize| -> Vec<&str> { wrappers[i].iter().map(String::as_str).collect() };
    let a = front(&up, &key)
        .redis(redis)
        .wrapper(&wrapper(0))
        .start()
        .await;
    let b = front(&up, &key)
        .redis_url(&redis_url)
        .wrapper(&wrapper(1))
        .start()
        .await;
    let token = a.create_token("carla").await.unwrap();
    let http = b.http();
    let seen_by_b = eventually(Duration::from_secs(5), || {
        let req = http.get(b.mcp_url()).bearer_auth(&token).send();
        async move { req.await.is_ok_and(|r| r.status() != 401) }
    })
    .await;
    assert!(seen_by_b, "gateway b does not know the token");

    // Connected through a; b calls with the same sealed credential at once.
    let prompt = asked(&session(&a, &token).await).await;
    connect(&a, &up, &Browser::for_gateway(&up), prompt.link(), ALICE_UP).await;
    let connected = Instant::now();
    let mut clients = Vec::new();
    for gw in [&a, &b, &a, &b, &a, &b, &a, &b] {
        let client = session(gw, &token).await;
        assert_eq!(whoami(&client).await["subject"], ALICE_UP);
        clients.push(client);
    }
    let before = counts(&up).await;
    assert!(
        connected.elapsed() < Duration::from_secs(TTL_SECS / 2),
        "the sessions took too long to open: the token may be refreshed already"
    );

    // Past the point where the token is stale (a tenth of its lifetime before expiry), every
    // session calls at once, half on each gateway: one refresh at the upstream.
    tokio::time::sleep_until((connected + Duration::from_secs(TTL_SECS - 1)).into()).await;
    let answers = futures::future::join_all(clients.iter().map(whoami)).await;
    for me in &answers {
        assert_eq!(me["subject"], ALICE_UP, "{me}");
    }
    let after = counts(&up).await;
    let refreshes = after.refreshes - before.refreshes;
    assert_eq!(
        refreshes, 1.0,
        "one refresh upstream: {before:?} → {after:?}"
    );
    assert_eq!(after.reuse, before.reuse, "no refresh token used twice");
    let joined: usize = logs
        .iter()
        .map(|l| log_lines(l, "refreshed by another caller"))
        .sum();
    let made: usize = logs
        .iter()
        .map(|l| log_lines(l, "upstream token refreshed"))
        .sum::<usize>()
        - joined;
    println!(
        "upstream_auth two gateways, one redis: concurrent calls {}, refreshes {refreshes} (made by the gateways: {made}), refresh races avoided: {joined}",
        answers.len()
    );
    assert_eq!(made, 1, "one gateway made the refresh");
}

/// An OAuth user of a TLS front: the link works in her browser signed in to the front (the
/// upstream's pages in a browser of their own: both gateways are cookies of 127.0.0.1), then
/// `/connections` shows the route connected with its expiry and disconnects it — revoking the
/// grant at the upstream first (RFC 7009) — and the next call asks to connect.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_oauth_users_disconnect_revokes_the_grant_upstream() {
    const ERIN: &str = "erin";
    const ERIN_PW: &str = "erin horse battery staple";
    let up = upstream().await;
    let dir = tempfile::tempdir().unwrap();
    let key = write_vault_key(dir.path()).unwrap();
    let ca = up.cert.as_ref().expect("a TLS upstream").cert.clone();
    // On https the front would register by metadata document, which the upstream cannot fetch
    // from loopback: dynamic registration, as configured.
    let front = Stack::builder()
        .upstream(NOWHERE)
        .limits(Limits::off())
        .oauth(OAuth::default())
        .vault_key(&key)
        .route(
            Route::url(NOTES, &up.mcp_url())
                .title("Notes")
                .ca_file(&ca)
                .upstream_auth(UpstreamAuth {
                    registration: Some("dcr".to_owned()),
                    ..UpstreamAuth::oauth()
                }),
        )
        .start()
        .await;
    front.add_user(ERIN, ERIN_PW).unwrap();
    let token = access_token_at(
        &front.route_url(NOTES),
        front.ca_pem(),
        ERIN,
        ERIN_PW,
        "mcp:read mcp:write",
    )
    .await
    .unwrap();
    let at_front = Browser::for_gateway(&front);
    at_front.sign_in(&front.base, ERIN, ERIN_PW).await.unwrap();
    let at_upstream = Browser::for_gateway(&up);

    let prompt = asked(&session(&front, &token).await).await;
    let authorize = at_front
        .get(prompt.link())
        .await
        .unwrap()
        .see_other()
        .unwrap();
    assert!(authorize.as_str().starts_with(&up.base), "{authorize}");
    let (back, _) = browser_step(&at_upstream, &authorize, ALICE_UP, PASSWORD, "approve")
        .await
        .unwrap();
    // The callback only in the browser that started it (its cookie), then "connected".
    let elsewhere = at_upstream.get(&back).await;
    assert!(
        elsewhere.is_err() || elsewhere.as_ref().is_ok_and(|p| p.status != 303),
        "the callback in another browser: {elsewhere:?}"
    );
    let landed = at_front.get(&back).await.unwrap();
    let done = at_front.get(&landed.see_other().unwrap()).await.unwrap();
    assert!(done.body.contains("connected"), "{}", done.body);
    let client = session(&front, &token).await;
    assert_eq!(whoami(&client).await["subject"], ALICE_UP);

    let list_url = Url::parse(&format!("{}/connections", front.base)).unwrap();
    let list = at_front.get(&list_url).await.unwrap();
    let row = list
        .body
        .split("<tr>")
        .find(|r| r.contains("<td data-label=\"Service\">Notes</td>"))
        .unwrap_or_else(|| panic!("no Notes row: {}", list.body));
    assert!(
        row.contains("<td data-label=\"Kind\">oauth</td><td data-label=\"State\">connected</td>"),
        "{row}"
    );
    assert_eq!(
        row.matches("\">20").count(),
        2,
        "a connected and an expiry date, no refresh yet: {row}"
    );
    let before = counts(&up).await;
    let revocations =
        |text: &str| metric_sum(text, "pforte_oauth_events_total", &["event=\"revocation\""]);
    let revoked_before = revocations(&metrics_text(&up.http(), &up.base).await.unwrap());
    let disconnect = pforte_tests::Form::parse_all(&list.url, &list.body)
        .unwrap()
        .into_iter()
        .find(|f| f.field("route") == Some(NOTES))
        .unwrap_or_else(|| panic!("no disconnect form: {}", list.body));
    let gone = at_front
        .submit(&disconnect, Some("disconnect"))
        .await
        .unwrap();
    let back = at_front.get(&gone.see_other().unwrap()).await.unwrap();
    assert!(back.body.contains("Disconnected"), "{}", back.body);
    let revoked_after = revocations(&metrics_text(&up.http(), &up.base).await.unwrap());
    assert!(
        revoked_after > revoked_before,
        "the upstream grant was not revoked at disconnect"
    );
    // The next call asks to connect (not reconnect: nothing is stored).
    let again = asked(&session(&front, &token).await).await;
    assert!(!again.is_reconnect(), "{again:?}");
    assert_eq!(counts(&up).await.static_tokens, before.static_tokens);
}

/// On https the front is known at the upstream by its client ID metadata document: no
/// registration, the upstream fetches `/connect/notes/client.json` from the front during the
/// authorization request, and the user's calls (and refreshes) run as that public client.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_https_front_is_known_upstream_by_its_client_id_metadata_document() {
    let dir = tempfile::tempdir().unwrap();
    // The upstream trusts the front's certificate once it is written here.
    let front_ca = dir.path().join("front-ca.pem");
    let wrapper = cimd_wrapper(&front_ca);
    let wrapper: Vec<&str> = wrapper.iter().map(String::as_str).collect();
    let up = upstream_through(&wrapper).await;
    let key = write_vault_key(dir.path()).unwrap();
    let ca = up.cert.as_ref().expect("a TLS upstream").cert.clone();
    let front = Stack::builder()
        .upstream(NOWHERE)
        .limits(Limits::off())
        .vault_key(&key)
        .route(
            Route::url(NOTES, &up.mcp_url())
                .title("Notes")
                .ca_file(&ca)
                .upstream_auth(UpstreamAuth::oauth()),
        )
        .start()
        .await;
    std::fs::write(&front_ca, front.ca_pem().unwrap()).unwrap();
    let before = metric_sum(
        &metrics_text(&up.http(), &up.base).await.unwrap(),
        "pforte_oauth_events_total",
        &["event=\"registration\""],
    );
    let token = front.create_token("cid").await.unwrap();
    let prompt = asked(&session(&front, &token).await).await;
    // The link's browser keeps the flow's cookie; the upstream's pages in a browser of their
    // own (both gateways' cookies are 127.0.0.1's).
    let at_front = Browser::for_gateway(&front);
    let at_upstream = Browser::for_gateway(&up);
    let authorize = at_front
        .get(prompt.link())
        .await
        .unwrap()
        .see_other()
        .unwrap();
    let document = format!("{}/connect/{NOTES}/client.json", front.base);
    assert_eq!(
        param(&authorize, "client_id").as_deref(),
        Some(document.as_str())
    );
    let (back, consent) = browser_step(&at_upstream, &authorize, ALICE_UP, PASSWORD, "approve")
        .await
        .unwrap();
    assert!(consent.contains("Pforte (Notes)"), "{consent}");
    let landed = at_front.get(&back).await.unwrap();
    let done = at_front.get(&landed.see_other().unwrap()).await.unwrap();
    assert!(done.body.contains("connected"), "{}", done.body);
    let client = session(&front, &token).await;
    let me = whoami(&client).await;
    assert_eq!(me["subject"], ALICE_UP, "{me}");
    assert_eq!(me["client"], document.as_str(), "{me}");
    let after = metric_sum(
        &metrics_text(&up.http(), &up.base).await.unwrap(),
        "pforte_oauth_events_total",
        &["event=\"registration\""],
    );
    assert_eq!(after, before, "no dynamic registration");
}
