//! End to end, OAuth 2.1 through the real gateway: `pforte serve` over TLS in front of
//! `mcp-service`, real HTTP, the login and consent forms submitted the way a browser submits
//! them (action, hidden inputs, cookie jar), and an rmcp client on the issued tokens — the
//! Claude.ai custom-connector flow, on the embedded store and on redis, plus the negative cases
//! only the running gateway can show (expiry, revocation reaching `/mcp`, replayed codes, wrong
//! resource, CIMD URLs on private addresses).
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::time::{Duration, Instant};

use pforte_tests::{
    OAuth, RedisServer, Stack, Throttle,
    oauth::{
        Browser, CLAUDE_CALLBACK, Discovered, Pkce, Registered, authorize_url, browser_step,
        discover, exchange_code, mcp_status, param, refresh, register_like_claude, revoke,
    },
};
use reqwest::StatusCode;
use serde_json::Value;

const USER: &str = "alice";
const PASSWORD: &str = "correct horse battery staple";

/// Which OAuth store the gateway uses.
#[derive(Clone, Copy, Debug)]
enum StoreKind {
    Embedded,
    Redis,
}

/// A stack with one user, a browser, and what discovery found.
struct Flow {
    gw: Stack,
    browser: Browser,
    d: Discovered,
}

impl Flow {
    /// `None` when the store is redis and `redis-server` is missing outside CI.
    async fn start(kind: StoreKind, oauth: OAuth) -> Option<Self> {
        let mut stack = Stack::builder().oauth(oauth);
        if let StoreKind::Redis = kind {
            stack = stack.redis(RedisServer::start()?);
        }
        let gw = stack.start().await;
        gw.add_user(USER, PASSWORD).unwrap();
        let browser = Browser::for_gateway(&gw);
        let d = discover(&browser.http, &gw.mcp_url()).await.unwrap();
        Some(Self { gw, browser, d })
    }

    fn http(&self) -> &reqwest::Client {
        &self.browser.http
    }

    /// Registers like Claude.ai and runs authorize → login → consent → approve; returns the
    /// client, the PKCE pair and the code.
    async fn authorized_code(&self, state: &str) -> (Registered, Pkce, String) {
        let client = register_like_claude(self.http(), &self.d).await.unwrap();
        let pkce = Pkce::new(state);
        let auth = authorize_url(
            &self.d,
            &client.client_id,
            CLAUDE_CALLBACK,
            &pkce,
            state,
            &[("resource", &self.d.resource), ("prompt", "consent")],
        )
        .unwrap();
        let (cb, _) = browser_step(&self.browser, &auth, USER, PASSWORD, "approve")
            .await
            .unwrap();
        let code = param(&cb, "code").expect("code in the callback");
        (client, pkce, code)
    }

    /// A full grant: (client, access token, refresh token).
    async fn tokens(&self, state: &str) -> (Registered, String, String) {
        let (client, pkce, code) = self.authorized_code(state).await;
        let tok = exchange_code(
            self.http(),
            &self.d,
            &client,
            &code,
            CLAUDE_CALLBACK,
            &pkce.verifier,
            &self.d.resource,
        )
        .await
        .unwrap();
        (client, tok.access().unwrap(), tok.refresh().unwrap())
    }

    async fn status(&self, token: &str) -> StatusCode {
        mcp_status(self.http(), &self.gw.mcp_url(), token).await
    }

    /// Polls `/mcp` with `token` every 50 ms until it answers 401; returns how long that took.
    /// (Gently: the gateway's per-principal rate limit counts every poll.)
    async fn refused_within(&self, token: &str, limit: Duration) -> Option<Duration> {
        let start = Instant::now();
        loop {
            if self.status(token).await == 401 {
                return Some(start.elapsed());
            }
            if start.elapsed() >= limit {
                return None;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    /// Whether any of `secrets` appears in plain text in what the store keeps: the embedded
    /// store's files (database and WAL), or redis's full dump.
    fn stored_in_plain_text(&self, secrets: &[&str]) -> Vec<String> {
        let mut blobs = Vec::new();
        match &self.gw.redis {
            Some(r) => blobs.push(r.dump().unwrap()),
            None => {
                for e in std::fs::read_dir(self.gw.data_dir()).unwrap() {
                    let p = e.unwrap().path();
                    if p.is_file() {
                        blobs.push(std::fs::read(p).unwrap());
                    }
                }
            }
        }
        assert!(
            blobs.iter().map(Vec::len).sum::<usize>() > 0,
            "nothing stored?"
        );
        secrets
            .iter()
            .filter(|s| {
                blobs
                    .iter()
                    .any(|b| b.windows(s.len()).any(|w| w == s.as_bytes()))
            })
            .map(|s| (*s).to_owned())
            .collect()
    }

    /// `whoami` through the gateway with an rmcp client on `token`.
    async fn whoami(&self, token: &str) -> Value {
        let client = self.gw.rmcp_client(token, &[]).await.unwrap();
        let me = pforte_tests::whoami(&client).await;
        client.cancel().await.unwrap();
        me
    }
}

/// Runs `$body(kind)` once on the embedded store and once on redis.
macro_rules! on_both_stores {
    ($scenario:ident, $embedded:ident, $redis:ident) => {
        #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
        async fn $embedded() {
            $scenario(StoreKind::Embedded).await;
        }
        #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
        async fn $redis() {
            $scenario(StoreKind::Redis).await;
        }
    };
}

/// The Claude.ai connector flow, every hop checked.
async fn connector_flow(kind: StoreKind) {
    let Some(s) = Flow::start(kind, OAuth::default()).await else {
        return;
    };
    let http = s.http();
    let base = s.gw.base.clone();

    // Discovery (done by Flow::start: 401 → RFC 9728 → RFC 8414); the issuer is the gateway's
    // origin, byte for byte, everywhere.
    assert_eq!(s.d.issuer, base);
    assert_eq!(s.d.resource, s.gw.mcp_url());
    let meta = &s.d.as_meta;
    for (k, v) in [
        ("authorization_endpoint", format!("{base}/authorize")),
        ("token_endpoint", format!("{base}/token")),
        ("registration_endpoint", format!("{base}/register")),
        ("revocation_endpoint", format!("{base}/revoke")),
    ] {
        assert_eq!(meta[k], v.as_str(), "{k}");
    }
    assert_eq!(
        meta["code_challenge_methods_supported"],
        serde_json::json!(["S256"])
    );
    assert_eq!(meta["authorization_response_iss_parameter_supported"], true);
    assert_eq!(meta["client_id_metadata_document_supported"], true);
    let oidc: Value = http
        .get(format!("{base}/.well-known/openid-configuration"))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(&oidc, meta);

    // DCR like Claude.ai.
    let client = register_like_claude(http, &s.d).await.unwrap();
    assert!(client.client_secret.is_some());
    assert_eq!(client.response["redirect_uris"][0], CLAUDE_CALLBACK);
    assert_eq!(
        client.response["token_endpoint_auth_method"],
        "client_secret_post"
    );

    // authorize → login page.
    let pkce = Pkce::new("flow");
    let auth = authorize_url(
        &s.d,
        &client.client_id,
        CLAUDE_CALLBACK,
        &pkce,
        "state-xyz",
        &[("resource", &s.d.resource), ("prompt", "consent")],
    )
    .unwrap();
    let page = s.browser.get(&auth).await.unwrap();
    assert_eq!(page.status, 200, "{}", page.body);
    let csp = page.header("content-security-policy").unwrap().to_owned();
    assert!(csp.contains("frame-ancestors 'none'"), "{csp}");
    let cookie = page.header("set-cookie").unwrap().to_owned();
    assert!(
        cookie.starts_with("__Host-pforte_session=")
            && cookie.contains("HttpOnly")
            && cookie.contains("SameSite=Lax")
            && cookie.contains("Secure"),
        "{cookie}"
    );
    assert!(page.body.contains("type=\"password\""), "a login page");
    let mut login = page.form().unwrap();
    assert_eq!(login.action.as_str(), format!("{base}/authorize"));
    assert!(login.field("csrf").is_some_and(|v| !v.is_empty()));

    // POST login → 303 back to /authorize → consent page.
    login.set("username", USER).unwrap();
    login.set("password", PASSWORD).unwrap();
    let after = s.browser.submit(&login, None).await.unwrap();
    let next = after.see_other().unwrap();
    // A new session id on login (no session fixation).
    let session_id = |c: &str| c.split(';').next().unwrap().to_owned();
    let renewed = after
        .header("set-cookie")
        .expect("a new session cookie on login");
    assert!(renewed.starts_with("__Host-pforte_session="), "{renewed}");
    assert_ne!(session_id(renewed), session_id(&cookie));
    assert!(
        next.as_str().starts_with(&format!("{base}/authorize")),
        "{next}"
    );
    let consent_page = s.browser.get(&next).await.unwrap();
    assert_eq!(consent_page.status, 200);
    let html = &consent_page.body;
    assert!(html.contains("Claude"), "consent names the client");
    assert!(
        html.contains("claude.ai"),
        "consent names the redirect host"
    );
    assert!(
        html.contains("mcp:read") && html.contains("mcp:write"),
        "consent names the scopes"
    );
    assert!(
        consent_page
            .header("content-security-policy")
            .is_some_and(|c| c.contains("frame-ancestors 'none'"))
    );
    let consent = consent_page.form().unwrap();

    // Approve → 303 to the callback with code, state and iss.
    let done = s.browser.submit(&consent, Some("approve")).await.unwrap();
    let cb = done.see_other().unwrap();
    assert!(cb.as_str().starts_with(CLAUDE_CALLBACK), "{cb}");
    assert_eq!(param(&cb, "state").as_deref(), Some("state-xyz"));
    assert_eq!(param(&cb, "iss").as_deref(), Some(base.as_str()));
    let code = param(&cb, "code").unwrap();

    // Token.
    let tok = exchange_code(
        http,
        &s.d,
        &client,
        &code,
        CLAUDE_CALLBACK,
        &pkce.verifier,
        &s.d.resource,
    )
    .await
    .unwrap();
    let access = tok.access().unwrap();
    let refresh1 = tok.refresh().unwrap();
    assert!(access.starts_with("pfat_"), "{access}");
    assert_eq!(tok.body["token_type"], "Bearer");
    assert_eq!(tok.body["expires_in"], 3600);

    // MCP through the gateway with the access token.
    let me = s.whoami(&access).await;
    assert_eq!(me["subject"], USER);
    assert_eq!(me["client"], client.client_id.as_str());
    assert_eq!(me["authKind"], "oauth");
    assert_eq!(me["host"], "pforte-tests");

    // A token in the query string is never looked at.
    let q = http
        .post(format!("{}?access_token={access}", s.gw.mcp_url()))
        .header("content-type", "application/json")
        .body("{}")
        .send()
        .await
        .unwrap();
    assert_eq!(q.status(), 401);

    // Refresh (rotation) → MCP with the new access token.
    let tok2 = refresh(http, &s.d, &client, &refresh1).await.unwrap();
    let access2 = tok2.access().unwrap();
    let refresh2 = tok2.refresh().unwrap();
    assert_ne!(access2, access);
    assert_ne!(refresh2, refresh1);
    let me = s.whoami(&access2).await;
    assert_eq!(me["subject"], USER);
    assert_eq!(me["client"], client.client_id.as_str());
    assert_eq!(me["authKind"], "oauth");

    // Revoke the access token → /mcp refuses it within 1 s.
    let r = revoke(http, &s.d, &client, &access2, "access_token")
        .await
        .unwrap();
    assert_eq!(r.status, 200);
    let took = s
        .refused_within(&access2, Duration::from_secs(1))
        .await
        .expect("the revoked access token was accepted for more than 1 s");
    eprintln!("revoked access token refused after {took:?}");
    let refused = http
        .post(s.gw.mcp_url())
        .bearer_auth(&access2)
        .header("content-type", "application/json")
        .body("{}")
        .send()
        .await
        .unwrap();
    let challenge = refused.headers()["www-authenticate"].to_str().unwrap();
    assert!(challenge.contains("error=\"invalid_token\""), "{challenge}");
    assert!(challenge.contains("resource_metadata="), "{challenge}");

    // Revoking the refresh token ends the grant: no more refreshing.
    let r = revoke(http, &s.d, &client, &refresh2, "refresh_token")
        .await
        .unwrap();
    assert_eq!(r.status, 200);
    let again = refresh(http, &s.d, &client, &refresh2).await.unwrap();
    assert_eq!(again.status, 400);
    assert_eq!(again.error(), Some("invalid_grant"));

    // At rest only hashes: no token, code, client secret or password in plain text.
    let secret = client.client_secret.clone().unwrap();
    let leaked = s.stored_in_plain_text(&[
        &access, &refresh1, &access2, &refresh2, &code, &secret, PASSWORD,
    ]);
    assert!(leaked.is_empty(), "stored in plain text: {leaked:?}");
    // (the check can see: the user name is stored as is)
    assert!(
        !s.stored_in_plain_text(&[USER, &client.client_id])
            .is_empty()
    );
}

on_both_stores!(
    connector_flow,
    connector_flow_on_the_embedded_store,
    connector_flow_on_redis
);

/// A short-lived access token stops working at `/mcp` once expired; the refresh token still
/// gets a new one.
async fn expired_access_token(kind: StoreKind) {
    let Some(s) = Flow::start(kind, OAuth::default().access_ttl_secs(2)).await else {
        return;
    };
    let (client, access, refresh_token) = s.tokens("expiry").await;
    let issued = Instant::now();
    assert_eq!(s.status(&access).await, 200, "fresh token accepted");
    let took = s
        .refused_within(&access, Duration::from_secs(6))
        .await
        .expect("an expired access token was still accepted 6 s after issue");
    assert!(
        issued.elapsed() >= Duration::from_millis(900),
        "refused too early: {took:?}"
    );
    let resp = s
        .http()
        .post(s.gw.mcp_url())
        .bearer_auth(&access)
        .header("content-type", "application/json")
        .body("{}")
        .send()
        .await
        .unwrap();
    let challenge = resp.headers()["www-authenticate"].to_str().unwrap();
    assert!(challenge.contains("error=\"invalid_token\""), "{challenge}");

    let tok = refresh(s.http(), &s.d, &client, &refresh_token)
        .await
        .unwrap();
    assert_eq!(tok.body["expires_in"], 2);
    assert_eq!(s.status(&tok.access().unwrap()).await, 200);
}

on_both_stores!(
    expired_access_token,
    expired_access_token_gets_401_on_the_embedded_store,
    expired_access_token_gets_401_on_redis
);

/// `pforte grant revoke` (another process, straight into the store) reaches the running
/// gateway's validation cache within 1 s.
async fn grant_revoked_from_the_cli(kind: StoreKind) {
    let Some(s) = Flow::start(kind, OAuth::default()).await else {
        return;
    };
    let (client, access, refresh_token) = s.tokens("cli-revoke").await;
    assert_eq!(s.status(&access).await, 200);
    let listed =
        s.gw.admin_cmd(&["grant", "list", "--user", USER], "")
            .unwrap();
    assert!(
        listed.contains("active") && listed.contains(&client.client_id),
        "{listed}"
    );
    s.gw.admin_cmd(&["grant", "revoke", "--user", USER], "")
        .unwrap();
    let took = s
        .refused_within(&access, Duration::from_secs(1))
        .await
        .expect("a grant revoked from the CLI was accepted for more than 1 s");
    eprintln!("grant revoked by the CLI refused after {took:?}");
    let again = refresh(s.http(), &s.d, &client, &refresh_token)
        .await
        .unwrap();
    assert_eq!(again.error(), Some("invalid_grant"));
}

on_both_stores!(
    grant_revoked_from_the_cli,
    cli_grant_revoke_is_refused_within_a_second_on_the_embedded_store,
    cli_grant_revoke_is_refused_within_a_second_on_redis
);

/// A replayed code → `invalid_grant`, and the tokens issued from it stop working at `/mcp`.
async fn code_replay(kind: StoreKind) {
    let Some(s) = Flow::start(kind, OAuth::default()).await else {
        return;
    };
    let (client, pkce, code) = s.authorized_code("replay").await;
    let exchange = || {
        exchange_code(
            s.http(),
            &s.d,
            &client,
            &code,
            CLAUDE_CALLBACK,
            &pkce.verifier,
            &s.d.resource,
        )
    };
    let first = exchange().await.unwrap();
    let access = first.access().unwrap();
    let refresh_token = first.refresh().unwrap();
    assert_eq!(s.status(&access).await, 200);

    let replay = exchange().await.unwrap();
    assert_eq!(replay.status, 400, "{}", replay.body);
    assert_eq!(replay.error(), Some("invalid_grant"));
    assert!(replay.body.get("access_token").is_none());

    s.refused_within(&access, Duration::from_secs(1))
        .await
        .expect("a token from a replayed code was still accepted after 1 s");
    let r = refresh(s.http(), &s.d, &client, &refresh_token)
        .await
        .unwrap();
    assert_eq!(r.error(), Some("invalid_grant"));
}

on_both_stores!(
    code_replay,
    code_replay_revokes_its_tokens_on_the_embedded_store,
    code_replay_revokes_its_tokens_on_redis
);

/// `resource` other than this MCP URL → `invalid_target` at /authorize (redirected, with state
/// and iss) and at /token; a trailing slash is the same resource.
async fn wrong_resource(kind: StoreKind) {
    let Some(s) = Flow::start(kind, OAuth::default()).await else {
        return;
    };
    let client = register_like_claude(s.http(), &s.d).await.unwrap();
    let pkce = Pkce::new("target");
    let evil = "https://evil.example/mcp";
    let auth = authorize_url(
        &s.d,
        &client.client_id,
        CLAUDE_CALLBACK,
        &pkce,
        "st-target",
        &[("resource", evil)],
    )
    .unwrap();
    let page = s.browser.get(&auth).await.unwrap();
    let cb = page.see_other().unwrap();
    assert!(cb.as_str().starts_with(CLAUDE_CALLBACK), "{cb}");
    assert_eq!(param(&cb, "error").as_deref(), Some("invalid_target"));
    assert_eq!(param(&cb, "state").as_deref(), Some("st-target"));
    assert_eq!(param(&cb, "iss").as_deref(), Some(s.d.issuer.as_str()));
    assert!(param(&cb, "code").is_none());

    // With the right resource (trailing slash: same canonical form) the code is issued, but
    // exchanging it for another resource is refused.
    let slash = format!("{}/", s.d.resource);
    let auth = authorize_url(
        &s.d,
        &client.client_id,
        CLAUDE_CALLBACK,
        &pkce,
        "st-ok",
        &[("resource", &slash)],
    )
    .unwrap();
    let (cb, _) = browser_step(&s.browser, &auth, USER, PASSWORD, "approve")
        .await
        .unwrap();
    let code = param(&cb, "code").expect("code");
    let tok = exchange_code(
        s.http(),
        &s.d,
        &client,
        &code,
        CLAUDE_CALLBACK,
        &pkce.verifier,
        evil,
    )
    .await
    .unwrap();
    assert_eq!(tok.status, 400, "{}", tok.body);
    assert_eq!(tok.error(), Some("invalid_target"));
}

on_both_stores!(
    wrong_resource,
    wrong_resource_is_invalid_target_on_the_embedded_store,
    wrong_resource_is_invalid_target_on_redis
);

/// A Client ID Metadata Document URL whose host is loopback (by address or by name) is refused
/// with an error page — no redirect, and no connection is ever made to it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cimd_client_id_on_a_private_address_is_refused() {
    let s = Flow::start(StoreKind::Embedded, OAuth::default())
        .await
        .unwrap();
    // Something listens there: the gateway must not even connect.
    let trap = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    trap.set_nonblocking(true).unwrap();
    let port = trap.local_addr().unwrap().port();
    let pkce = Pkce::new("cimd");
    for client_id in [
        format!("https://127.0.0.1:{port}/client.json"),
        format!("https://localhost:{port}/client.json"),
        format!("https://10.0.0.1:{port}/client.json"),
    ] {
        let callback = "http://127.0.0.1:33418/callback";
        let auth = authorize_url(&s.d, &client_id, callback, &pkce, "st-cimd", &[]).unwrap();
        let page = s.browser.get(&auth).await.unwrap();
        assert_eq!(page.status, 400, "{client_id}: {}", page.body);
        assert!(page.header("location").is_none(), "{client_id}: redirected");
        assert!(
            page.header("content-security-policy")
                .is_some_and(|c| c.contains("frame-ancestors 'none'"))
        );
        assert!(page.body.contains("<html") || page.body.contains("<!DOCTYPE"));
    }
    assert!(
        matches!(trap.accept(), Err(e) if e.kind() == std::io::ErrorKind::WouldBlock),
        "the gateway connected to a private address"
    );
}

/// Registration is throttled per client IP, and the IP the authorization server sees is the TCP
/// peer's: an `x-pforte-client-ip` header sent through the gateway cannot reset the budget.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn registration_is_throttled_per_ip_and_the_ip_header_cannot_be_spoofed() {
    let throttled = OAuth::default().register_per_ip(Throttle::new(3, 1));
    let s = Flow::start(StoreKind::Embedded, throttled).await.unwrap();
    let url = s.d.endpoint("registration_endpoint").unwrap();
    let body = serde_json::json!({"redirect_uris": [CLAUDE_CALLBACK], "token_endpoint_auth_method": "client_secret_post"});
    let mut statuses = Vec::new();
    for i in 0..5 {
        let resp = s
            .http()
            .post(url.clone())
            .header("x-pforte-client-ip", format!("203.0.113.{i}"))
            .header("x-forwarded-for", format!("198.51.100.{i}"))
            .json(&body)
            .send()
            .await
            .unwrap();
        statuses.push(resp.status().as_u16());
    }
    assert_eq!(statuses, [201, 201, 201, 429, 429], "{statuses:?}");
}
