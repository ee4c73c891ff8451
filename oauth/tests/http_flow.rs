//! The full connector flow over real HTTP through the axum router (127.0.0.1:0, reqwest with a
//! cookie jar, forms parsed like a browser submits them), on the SQLite and the redis store.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use base64::Engine;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use pforte_oauth::{
    Admin, AuthServer, Budget, OAuthConfig, PasswordHashing, RateLimiter, RedisStore, Secret,
    SqliteStore, Store, ValidationError, router,
};
use pforte_test_support::{Form, RedisServer};
use reqwest::StatusCode;
use reqwest::redirect::Policy;
use serde_json::{Value, json};
use sha2::{Digest, Sha256};
use std::sync::Arc;
use url::Url;

const CALLBACK: &str = "https://claude.ai/api/mcp/auth_callback";
const VERIFIER: &str = "a-long-enough-verifier-0123456789-abcdefghijklmnop";
const CHEAP: PasswordHashing = PasswordHashing {
    memory_kib: 64,
    iterations: 1,
    parallelism: 1,
};

/// The throttles are not what these tests are about (the gateway's limiter counts them): a
/// limiter that allows everything.
struct Unlimited;

#[async_trait::async_trait]
impl RateLimiter for Unlimited {
    async fn check(&self, _budget: &Budget<'_>) -> Result<(), u64> {
        Ok(())
    }
    async fn refund(&self, _budget: &Budget<'_>) {}
    async fn reset(&self, _budget: &Budget<'_>) {}
}

/// The page's one form (method POST), as a browser would submit it; `page` is the URL it was
/// fetched from.
fn parse_form(page: &str, html: &str) -> Form {
    let form = Form::parse(&Url::parse(page).unwrap(), html).unwrap();
    assert_eq!(form.method, "post");
    form
}

struct Running {
    base: String,
    server: Arc<AuthServer>,
    http: reqwest::Client,
}

async fn start(store: Arc<dyn Store>, cookie_secure: bool) -> Running {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let base = format!("http://{}", listener.local_addr().unwrap());
    let mut cfg = OAuthConfig::new(&base).unwrap();
    cfg.cookie_secure = cookie_secure;
    cfg.password_hashing = CHEAP;
    Admin::new(store.clone())
        .with_hashing(CHEAP)
        .add_user("alice", &Secret::new("correct horse"))
        .await
        .unwrap();
    let server = AuthServer::builder(cfg, store, Arc::new(Unlimited))
        .build()
        .await
        .unwrap();
    let app = router(server.clone());
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    let http = reqwest::Client::builder()
        .cookie_store(true)
        .redirect(Policy::none())
        .build()
        .unwrap();
    Running { base, server, http }
}

fn location(resp: &reqwest::Response) -> String {
    assert_eq!(resp.status(), StatusCode::SEE_OTHER);
    resp.headers()["location"].to_str().unwrap().to_owned()
}

async fn full_flow(store: Arc<dyn Store>) {
    let r = start(store, false).await;
    let (base, http) = (&r.base, &r.http);

    // RFC 8414 metadata
    let meta: Value = http
        .get(format!("{base}/.well-known/oauth-authorization-server"))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(meta["issuer"], base.as_str());
    let mirror: Value = http
        .get(format!("{base}/.well-known/openid-configuration"))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(mirror, meta);
    let resource = format!("{base}/mcp");

    // DCR, the way Claude.ai registers
    let resp = http
        .post(meta["registration_endpoint"].as_str().unwrap())
        .json(&json!({"client_name": "Claude", "redirect_uris": [CALLBACK], "token_endpoint_auth_method": "client_secret_post",
                      "grant_types": ["authorization_code", "refresh_token"], "response_types": ["code"]}))
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), StatusCode::CREATED);
    let reg: Value = resp.json().await.unwrap();
    let (cid, secret) = (
        reg["client_id"].as_str().unwrap().to_owned(),
        reg["client_secret"].as_str().unwrap().to_owned(),
    );
    assert_eq!(reg["redirect_uris"][0], CALLBACK);

    // authorize → login page
    let challenge = URL_SAFE_NO_PAD.encode(Sha256::digest(VERIFIER.as_bytes()));
    let mut auth = Url::parse(meta["authorization_endpoint"].as_str().unwrap()).unwrap();
    auth.query_pairs_mut().extend_pairs([
        ("response_type", "code"),
        ("client_id", &cid),
        ("redirect_uri", CALLBACK),
        ("state", "st-123"),
        ("code_challenge", &challenge),
        ("code_challenge_method", "S256"),
        ("resource", &format!("{resource}/")),
        ("prompt", "consent"),
    ]);
    let resp = http.get(auth.clone()).send().await.unwrap();
    assert_eq!(resp.status(), StatusCode::OK);
    let csp = resp.headers()["content-security-policy"]
        .to_str()
        .unwrap()
        .to_owned();
    assert!(
        csp.contains("frame-ancestors 'none'") && csp.contains("default-src 'none'"),
        "{csp}"
    );
    assert!(
        resp.headers()["set-cookie"]
            .to_str()
            .unwrap()
            .contains("HttpOnly; SameSite=Lax")
    );
    let mut login = parse_form(base, &resp.text().await.unwrap());
    assert_eq!(login.action_attr, "/authorize");

    // CSRF token missing → 403, no code
    let no_csrf: Vec<_> = login
        .fields
        .iter()
        .filter(|(n, _)| n != "csrf")
        .cloned()
        .collect();
    let resp = http
        .post(format!("{base}/authorize"))
        .form(&no_csrf)
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), StatusCode::FORBIDDEN);

    // wrong password → login page again, no redirect
    login.set("username", "alice").unwrap();
    login.set("password", "not it").unwrap();
    // (the Sign-in button has no name, so a browser sends only the inputs)
    let resp = http
        .post(format!("{base}/authorize"))
        .form(&login.fields)
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), StatusCode::UNAUTHORIZED);
    let mut login = parse_form(base, &resp.text().await.unwrap());

    // right password → 303 back to /authorize → consent page
    login.set("password", "correct horse").unwrap();
    let resp = http
        .post(format!("{base}/authorize"))
        .form(&login.fields)
        .send()
        .await
        .unwrap();
    let next = location(&resp);
    let resp = http.get(format!("{base}{next}")).send().await.unwrap();
    assert_eq!(resp.status(), StatusCode::OK);
    let html = resp.text().await.unwrap();
    assert!(
        html.contains("Claude") && html.contains("claude.ai") && html.contains("mcp:read"),
        "consent names client, host, scopes"
    );
    let consent = parse_form(base, &html);

    // approve → 303 to the callback with code, state, iss
    let resp = http
        .post(format!("{base}/authorize"))
        .form(&consent.body(Some("approve")).unwrap())
        .send()
        .await
        .unwrap();
    let cb = Url::parse(&location(&resp)).unwrap();
    assert!(cb.as_str().starts_with(CALLBACK));
    let q: Vec<(String, String)> = cb.query_pairs().into_owned().collect();
    let get = |k: &str| q.iter().find(|(n, _)| n == k).map(|(_, v)| v.clone());
    assert_eq!(get("state").as_deref(), Some("st-123"));
    assert_eq!(
        get("iss").as_deref(),
        Some(base.as_str()),
        "iss byte-identical to the metadata issuer"
    );
    let code = get("code").unwrap();

    // token
    let token_url = meta["token_endpoint"].as_str().unwrap();
    let form = [
        ("grant_type", "authorization_code"),
        ("code", &code),
        ("redirect_uri", CALLBACK),
        ("code_verifier", VERIFIER),
        ("client_id", &cid),
        ("client_secret", &secret),
        ("resource", &resource),
    ];
    let resp = http.post(token_url).form(&form).send().await.unwrap();
    assert_eq!(resp.status(), StatusCode::OK);
    assert_eq!(resp.headers()["cache-control"], "no-store");
    let tok: Value = resp.json().await.unwrap();
    assert_eq!(tok["token_type"], "Bearer");
    assert_eq!(tok["expires_in"], 3600);
    let access = tok["access_token"].as_str().unwrap().to_owned();
    let refresh = tok["refresh_token"].as_str().unwrap().to_owned();
    let validator = r.server.validator();
    let p = validator.validate(&access).await.unwrap();
    assert_eq!(
        (p.subject.as_str(), p.client_id.as_str()),
        ("alice", cid.as_str())
    );

    // replay → invalid_grant, and the tokens from that code are revoked
    let resp = http.post(token_url).form(&form).send().await.unwrap();
    assert_eq!(resp.status(), StatusCode::BAD_REQUEST);
    assert_eq!(
        resp.json::<Value>().await.unwrap()["error"],
        "invalid_grant"
    );
    assert!(matches!(
        validator.validate(&access).await,
        Err(ValidationError::Invalid)
    ));
    let resp = http
        .post(token_url)
        .form(&[
            ("grant_type", "refresh_token"),
            ("refresh_token", &refresh),
            ("client_id", &cid),
            ("client_secret", &secret),
        ])
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), StatusCode::BAD_REQUEST);

    // a fresh authorization (session still logged in: straight to consent) → token → refresh
    let resp = http.get(auth.clone()).send().await.unwrap();
    let consent = parse_form(base, &resp.text().await.unwrap());
    let resp = http
        .post(format!("{base}/authorize"))
        .form(&consent.body(Some("approve")).unwrap())
        .send()
        .await
        .unwrap();
    let cb = Url::parse(&location(&resp)).unwrap();
    let code = cb
        .query_pairs()
        .find(|(k, _)| k == "code")
        .unwrap()
        .1
        .into_owned();
    let form = [
        ("grant_type", "authorization_code"),
        ("code", &code),
        ("redirect_uri", CALLBACK),
        ("code_verifier", VERIFIER),
        ("client_id", &cid),
        ("client_secret", &secret),
    ];
    let tok: Value = http
        .post(token_url)
        .form(&form)
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let refresh = tok["refresh_token"].as_str().unwrap().to_owned();

    // wrong client secret → 401 invalid_client with WWW-Authenticate
    let resp = http
        .post(token_url)
        .form(&[
            ("grant_type", "refresh_token"),
            ("refresh_token", &refresh),
            ("client_id", &cid),
            ("client_secret", "pfcs_wrong"),
        ])
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), StatusCode::UNAUTHORIZED);
    assert!(resp.headers().contains_key("www-authenticate"));
    assert_eq!(
        resp.json::<Value>().await.unwrap()["error"],
        "invalid_client"
    );

    let refreshed: Value = http
        .post(token_url)
        .form(&[
            ("grant_type", "refresh_token"),
            ("refresh_token", &refresh),
            ("client_id", &cid),
            ("client_secret", &secret),
        ])
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let access2 = refreshed["access_token"].as_str().unwrap().to_owned();
    let refresh2 = refreshed["refresh_token"].as_str().unwrap().to_owned();
    assert_ne!(refresh2, refresh);
    assert!(validator.validate(&access2).await.is_ok());

    // revoke the refresh token → the family (and access2) is gone
    let resp = http
        .post(meta["revocation_endpoint"].as_str().unwrap())
        .form(&[
            ("token", refresh2.as_str()),
            ("token_type_hint", "refresh_token"),
            ("client_id", &cid),
            ("client_secret", &secret),
        ])
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), StatusCode::OK);
    assert!(matches!(
        validator.validate(&access2).await,
        Err(ValidationError::Invalid)
    ));

    // Deny → access_denied
    let resp = http.get(auth.clone()).send().await.unwrap();
    let consent = parse_form(base, &resp.text().await.unwrap());
    let resp = http
        .post(format!("{base}/authorize"))
        .form(&consent.body(Some("deny")).unwrap())
        .send()
        .await
        .unwrap();
    let cb = Url::parse(&location(&resp)).unwrap();
    assert!(
        cb.query_pairs()
            .any(|(k, v)| k == "error" && v == "access_denied")
    );
    assert!(!cb.query_pairs().any(|(k, _)| k == "code"));
}

#[tokio::test]
async fn full_flow_over_http_on_sqlite() {
    let dir = tempfile::tempdir().unwrap();
    let store = Arc::new(SqliteStore::open(&dir.path().join("oauth.db")).unwrap());
    full_flow(store).await;
}

#[tokio::test]
async fn full_flow_over_http_on_redis() {
    let Some(redis) = RedisServer::start() else {
        return;
    };
    let store = Arc::new(RedisStore::connect(&redis.url(), "flow:").unwrap());
    full_flow(store).await;
}

#[tokio::test]
async fn secure_host_cookie_by_default() {
    let store = Arc::new(SqliteStore::in_memory().unwrap());
    let r = start(store, true).await;
    let reg: Value = r
        .http
        .post(format!("{}/register", r.base))
        .json(&json!({"redirect_uris": ["http://127.0.0.1/cb"], "token_endpoint_auth_method": "none"}))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let challenge = URL_SAFE_NO_PAD.encode(Sha256::digest(VERIFIER.as_bytes()));
    let mut auth = Url::parse(&format!("{}/authorize", r.base)).unwrap();
    auth.query_pairs_mut().extend_pairs([
        ("response_type", "code"),
        ("client_id", reg["client_id"].as_str().unwrap()),
        ("code_challenge", &challenge),
        ("code_challenge_method", "S256"),
    ]);
    let resp = r.http.get(auth).send().await.unwrap();
    let cookie = resp.headers()["set-cookie"].to_str().unwrap();
    assert!(cookie.starts_with("__Host-pforte_session=pfa_"), "{cookie}");
    assert!(
        cookie.contains("; Path=/; HttpOnly; SameSite=Lax") && cookie.ends_with("; Secure"),
        "{cookie}"
    );
    assert_eq!(resp.headers()["x-frame-options"], "DENY");
    // browser-based clients may call the API endpoints cross-origin; /authorize is not CORS
    let pre = r
        .http
        .request(reqwest::Method::OPTIONS, format!("{}/token", r.base))
        .send()
        .await
        .unwrap();
    assert_eq!(pre.status(), StatusCode::NO_CONTENT);
    assert_eq!(pre.headers()["access-control-allow-origin"], "*");
    let meta = r
        .http
        .get(format!("{}/.well-known/oauth-authorization-server", r.base))
        .send()
        .await
        .unwrap();
    assert_eq!(meta.headers()["access-control-allow-origin"], "*");
    // an unregistered redirect shows a page, never a redirect
    let resp = r
        .http
        .get(format!("{}/authorize?response_type=code&client_id={}&redirect_uri=https%3A%2F%2Fevil.example%2Fcb", r.base, reg["client_id"].as_str().unwrap()))
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), StatusCode::BAD_REQUEST);
    assert!(resp.headers().get("location").is_none());
}
