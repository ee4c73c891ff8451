//! End to end behind a trusted proxy: a gateway with `trusted_proxies = ["127.0.0.1"]` takes
//! the client IP from `X-Forwarded-For`, and the authorization server's throttles see that IP
//! (not the proxy's): registrations from many clients all pass, and one client over the login
//! throttle is refused while another is not. Every `X-Forwarded-For` line counts (a client's
//! forged line before the proxy's own does not win), and `/metrics` answers only a client on
//! this machine, not the proxy.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use pforte_tests::{
    OAuth, Stack, Throttle,
    oauth::{CLAUDE_CALLBACK, Form, Pkce, authorize_url, discover, register_like_claude},
};
use reqwest::StatusCode;

const USER: &str = "alice";
const PASSWORD: &str = "correct horse battery staple";

/// A plain-HTTP gateway that trusts the proxy on 127.0.0.1, with `oauth` settings.
async fn proxied_gateway(oauth: OAuth) -> Stack {
    Stack::builder()
        .plain_http()
        .trusted_proxies(&["127.0.0.1"])
        .oauth(oauth)
        .start()
        .await
}

/// Twelve registrations, each from another client behind the proxy: all 201 (the default
/// budget is 10 per IP; before the fix the proxy's own IP was the key: 10 × 201, then 429).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn registrations_are_throttled_per_forwarded_client() {
    let gw = proxied_gateway(OAuth::default()).await;
    let http = gw.http();
    let d = discover(&http, &gw.mcp_url()).await.unwrap();
    let url = d.endpoint("registration_endpoint").unwrap();
    let body = serde_json::json!({"redirect_uris": [CLAUDE_CALLBACK], "token_endpoint_auth_method": "client_secret_post"});
    let mut statuses = Vec::new();
    for i in 0..12 {
        let resp = http
            .post(url.clone())
            .header("x-forwarded-for", format!("198.51.100.{}", i + 1))
            .json(&body)
            .send()
            .await
            .unwrap();
        statuses.push(resp.status().as_u16());
    }
    assert_eq!(statuses, [201; 12], "{statuses:?}");
    // One client alone still has its budget of 10.
    let mut one = Vec::new();
    for _ in 0..11 {
        let resp = http
            .post(url.clone())
            .header("x-forwarded-for", "203.0.113.50")
            .json(&body)
            .send()
            .await
            .unwrap();
        one.push(resp.status().as_u16());
    }
    assert_eq!(&one[..10], [201; 10], "{one:?}");
    assert_eq!(one[10], 429, "{one:?}");
}

/// A proxy that adds its own `X-Forwarded-For` line (instead of appending to the client's): the
/// client's forged first line is not believed. Twelve registrations, each with another forged
/// line but the same real client: ten pass, then 429 (before: only the first line was read, so
/// each forged IP had a budget of its own: 12 × 201).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_forged_forwarded_for_line_before_the_proxys_own_is_not_believed() {
    let gw = proxied_gateway(OAuth::default()).await;
    let http = gw.http();
    let d = discover(&http, &gw.mcp_url()).await.unwrap();
    let url = d.endpoint("registration_endpoint").unwrap();
    let body = serde_json::json!({"redirect_uris": [CLAUDE_CALLBACK], "token_endpoint_auth_method": "client_secret_post"});
    let mut statuses = Vec::new();
    for i in 0..12 {
        let resp = http
            .post(url.clone())
            // The client's own (forged) line, then the proxy's line with the real address.
            .header("x-forwarded-for", format!("198.51.100.{}", i + 1))
            .header("x-forwarded-for", "203.0.113.60")
            .json(&body)
            .send()
            .await
            .unwrap();
        statuses.push(resp.status().as_u16());
    }
    assert_eq!(&statuses[..10], [201; 10], "{statuses:?}");
    assert_eq!(&statuses[10..], [429; 2], "{statuses:?}");
}

/// `/metrics` on the public listener: a scrape from this machine is answered; the same request
/// through the trusted same-host proxy for an outside client is not (before: the socket peer,
/// loopback, decided).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn metrics_are_judged_on_the_resolved_client() {
    let gw = proxied_gateway(OAuth::default()).await;
    let http = gw.http();
    let url = format!("{}/metrics", gw.base);
    let direct = http.get(&url).send().await.unwrap();
    assert_eq!(direct.status(), StatusCode::OK);
    let outside = http
        .get(&url)
        .header("x-forwarded-for", "203.0.113.7")
        .send()
        .await
        .unwrap();
    assert_eq!(outside.status(), StatusCode::NOT_FOUND);
    let local = http
        .get(&url)
        .header("x-forwarded-for", "127.0.0.1")
        .send()
        .await
        .unwrap();
    assert_eq!(
        local.status(),
        StatusCode::OK,
        "a local client through the proxy"
    );
}

/// A cookie-keeping client that sends every request as coming from `client_ip` through the
/// trusted proxy.
struct Client {
    http: reqwest::Client,
    ip: &'static str,
}

impl Client {
    fn new(ip: &'static str) -> Self {
        let http = reqwest::Client::builder()
            .cookie_store(true)
            .redirect(reqwest::redirect::Policy::none())
            .build()
            .unwrap();
        Self { http, ip }
    }

    async fn login_form(&self, authorize: &url::Url) -> Form {
        let resp = self
            .http
            .get(authorize.clone())
            .header("x-forwarded-for", self.ip)
            .send()
            .await
            .unwrap();
        assert_eq!(resp.status(), StatusCode::OK);
        let html = resp.text().await.unwrap();
        Form::parse(authorize, &html).unwrap()
    }

    async fn sign_in(&self, form: &Form, password: &str) -> reqwest::Response {
        let mut form = form.clone();
        form.set("username", USER).unwrap();
        form.set("password", password).unwrap();
        self.http
            .post(form.action.clone())
            .header("x-forwarded-for", self.ip)
            .form(&form.body(None).unwrap())
            .send()
            .await
            .unwrap()
    }
}

/// One forwarded client guessing passwords is throttled (429 with `Retry-After`); another
/// client behind the same proxy signs in with the right password at once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn login_throttle_keys_the_forwarded_client_not_the_proxy() {
    let gw = proxied_gateway(OAuth::default().login_per_ip(Throttle::new(3, 1))).await;
    gw.add_user(USER, PASSWORD).unwrap();
    let http = gw.http();
    let d = discover(&http, &gw.mcp_url()).await.unwrap();
    let reg = register_like_claude(&http, &d).await.unwrap();
    let pkce = Pkce::new("trusted-proxy");
    let authorize = authorize_url(&d, &reg.client_id, CLAUDE_CALLBACK, &pkce, "s", &[]).unwrap();

    let attacker = Client::new("198.51.100.66");
    let form = attacker.login_form(&authorize).await;
    let mut statuses = Vec::new();
    for _ in 0..5 {
        let resp = attacker.sign_in(&form, "wrong").await;
        if resp.status() == StatusCode::TOO_MANY_REQUESTS {
            let retry: u64 = resp.headers()["retry-after"]
                .to_str()
                .unwrap()
                .parse()
                .unwrap();
            assert!(retry >= 1);
        }
        statuses.push(resp.status().as_u16());
    }
    assert_eq!(statuses, [401, 401, 401, 429, 429], "{statuses:?}");

    let owner = Client::new("203.0.113.7");
    let form = owner.login_form(&authorize).await;
    let resp = owner.sign_in(&form, PASSWORD).await;
    assert_eq!(
        resp.status(),
        StatusCode::SEE_OTHER,
        "another client signs in"
    );
}
