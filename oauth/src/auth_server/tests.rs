//! Service-level tests of every protocol rule with a fake clock: the whole flow through
//! `AuthServer` without HTTP, and one test per negative case of the issue.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use async_trait::async_trait;
use base64::Engine;
use pforte_clock::ManualClock;
use serde_json::{Value, json};
use std::sync::Arc;
use std::time::Duration;
use url::Url;

use super::*;
use crate::admin::Admin;
use crate::auth_server::authorize::{AuthorizeOutcome, Page};
use crate::cimd::FetchedDocument;
use crate::config::{PasswordHashing, Quota};
use crate::crypto::{Secret, pkce_s256};
use crate::error::ValidationError;
use crate::protocol::cimd::CimdError;
use crate::store::SqliteStore;

mod limiter;
use limiter::TestLimiter;

const T0: u64 = 1_800_000_000;
const VERIFIER: &str = "dBjftJeZ4CVP-mB92K27uhbUJU1p1r_wW1gFWFOEjXk";
const CALLBACK: &str = "https://claude.ai/api/mcp/auth_callback";
const CHEAP: PasswordHashing = PasswordHashing {
    memory_kib: 64,
    iterations: 1,
    parallelism: 1,
};

struct Docs(Value);

#[async_trait]
impl DocumentFetcher for Docs {
    async fn fetch(&self, _url: &Url) -> Result<FetchedDocument, CimdError> {
        Ok(FetchedDocument {
            body: self.0.to_string().into_bytes(),
            cache_control: None,
        })
    }
}

struct H {
    s: Arc<AuthServer>,
    clock: Arc<ManualClock>,
    store: Arc<dyn Store>,
}

fn config() -> OAuthConfig {
    let mut cfg = OAuthConfig::new("https://gw.example").unwrap();
    cfg.password_hashing = CHEAP;
    cfg
}

async fn harness_with(cfg: OAuthConfig, fetcher: Option<Arc<dyn DocumentFetcher>>) -> H {
    let store: Arc<dyn Store> = Arc::new(SqliteStore::in_memory().unwrap());
    let clock = Arc::new(ManualClock::at(Duration::from_secs(T0)));
    let limiter = Arc::new(TestLimiter::new(clock.clone()));
    let mut b = AuthServer::builder(cfg, store.clone(), limiter).clock(clock.clone());
    if let Some(f) = fetcher {
        b = b.document_fetcher(f);
    }
    let s = b.build().await.unwrap();
    Admin::new(store.clone())
        .with_hashing(CHEAP)
        .with_clock(clock.clone())
        .add_user("alice", &Secret::new("correct horse"))
        .await
        .unwrap();
    H { s, clock, store }
}

async fn harness() -> H {
    harness_with(config(), None).await
}

fn q(pairs: &[(&str, &str)]) -> String {
    url::form_urlencoded::Serializer::new(String::new())
        .extend_pairs(pairs)
        .finish()
}

fn query_of(location: &str) -> Vec<(String, String)> {
    Url::parse(location)
        .unwrap()
        .query_pairs()
        .into_owned()
        .collect()
}

fn get<'a>(pairs: &'a [(String, String)], k: &str) -> Option<&'a str> {
    pairs.iter().find(|(n, _)| n == k).map(|(_, v)| v.as_str())
}

impl H {
    async fn register(&self, method: &str) -> (String, Option<String>) {
        let body = json!({"redirect_uris": [CALLBACK, "http://localhost/callback"], "token_endpoint_auth_method": method, "client_name": "Claude"});
        let v = self
            .s
            .register(body.to_string().as_bytes(), None)
            .await
            .unwrap();
        (
            v["client_id"].as_str().unwrap().to_owned(),
            v["client_secret"].as_str().map(str::to_owned),
        )
    }

    fn auth_query(&self, client_id: &str, extra: &[(&str, &str)]) -> String {
        let challenge = pkce_s256(VERIFIER);
        let mut p = vec![
            ("response_type", "code"),
            ("client_id", client_id),
            ("redirect_uri", CALLBACK),
            ("state", "xyz"),
            ("code_challenge", challenge.as_str()),
            ("code_challenge_method", "S256"),
            ("resource", "https://gw.example/mcp"),
        ];
        for (k, v) in extra {
            p.retain(|(n, _)| n != k);
            if !v.is_empty() {
                p.push((k, v));
            }
        }
        q(&p)
    }

    /// GET → login → consent form; returns (session cookie, consent csrf, request).
    async fn login(
        &self,
        query: &str,
        password: &str,
    ) -> Result<(String, String, String), AuthorizeOutcome> {
        let r = self.s.authorize_get(query, None, None).await;
        let cookie = r.set_session.clone().unwrap().0.expose().to_owned();
        let AuthorizeOutcome::Page {
            page: Page::Login(login),
            ..
        } = r.outcome
        else {
            return Err(r.outcome);
        };
        let body = q(&[
            ("step", "login"),
            ("csrf", &login.csrf),
            ("request", &login.request),
            ("username", "alice"),
            ("password", password),
        ]);
        let r = self.s.authorize_post(&body, Some(&cookie), None).await;
        let AuthorizeOutcome::Redirect { location } = &r.outcome else {
            return Err(r.outcome);
        };
        assert!(location.starts_with("/authorize?"));
        let cookie = r.set_session.unwrap().0.expose().to_owned();
        let r = self
            .s
            .authorize_get(&location["/authorize?".len()..], Some(&cookie), None)
            .await;
        let AuthorizeOutcome::Page {
            page: Page::Consent(c),
            ..
        } = r.outcome
        else {
            panic!("{:?}", r.outcome)
        };
        Ok((cookie, c.csrf, c.request))
    }

    async fn decide(&self, query: &str, decision: &str) -> AuthorizeOutcome {
        let (cookie, csrf, request) = self.login(query, "correct horse").await.unwrap();
        let body = q(&[
            ("step", "consent"),
            ("csrf", &csrf),
            ("request", &request),
            ("decision", decision),
        ]);
        self.s
            .authorize_post(&body, Some(&cookie), None)
            .await
            .outcome
    }

    async fn code(&self, client_id: &str) -> String {
        let AuthorizeOutcome::Redirect { location } = self
            .decide(&self.auth_query(client_id, &[]), "approve")
            .await
        else {
            panic!("no redirect")
        };
        let p = query_of(&location);
        assert_eq!(get(&p, "state"), Some("xyz"));
        assert_eq!(get(&p, "iss"), Some("https://gw.example"));
        get(&p, "code").unwrap().to_owned()
    }

    async fn exchange(
        &self,
        client_id: &str,
        secret: Option<&str>,
        code: &str,
        verifier: &str,
    ) -> Result<crate::protocol::token::TokenResponse, OAuthError> {
        let mut p = vec![
            ("grant_type", "authorization_code"),
            ("code", code),
            ("redirect_uri", CALLBACK),
            ("code_verifier", verifier),
            ("client_id", client_id),
        ];
        if let Some(s) = secret {
            p.push(("client_secret", s));
        }
        self.s.token(&q(&p), None, None).await
    }

    async fn refresh(
        &self,
        client_id: &str,
        secret: Option<&str>,
        rt: &str,
    ) -> Result<crate::protocol::token::TokenResponse, OAuthError> {
        let mut p = vec![
            ("grant_type", "refresh_token"),
            ("refresh_token", rt),
            ("client_id", client_id),
        ];
        if let Some(s) = secret {
            p.push(("client_secret", s));
        }
        self.s.token(&q(&p), None, None).await
    }
}

fn redirect_error(out: &AuthorizeOutcome) -> String {
    match out {
        AuthorizeOutcome::Redirect { location } => {
            let p = query_of(location);
            assert!(get(&p, "code").is_none());
            assert_eq!(get(&p, "iss"), Some("https://gw.example"));
            assert_eq!(get(&p, "state"), Some("xyz"));
            get(&p, "error").unwrap().to_owned()
        }
        other => panic!("expected error redirect, got {other:?}"),
    }
}

fn is_error_page(out: &AuthorizeOutcome) -> bool {
    matches!(
        out,
        AuthorizeOutcome::Page {
            page: Page::Error(_),
            ..
        }
    )
}

#[tokio::test]
async fn full_flow_confidential_client() {
    let h = harness().await;
    let (cid, secret) = h.register("client_secret_post").await;
    let code = h.code(&cid).await;
    let t = h
        .exchange(&cid, secret.as_deref(), &code, VERIFIER)
        .await
        .unwrap();
    assert_eq!(t.expires_in, 3600);
    assert_eq!(t.scope, "mcp:read mcp:write");
    assert!(t.access_token.expose().len() >= 43, "≥ 256 bits");
    let v = h.s.validator();
    let p = v.validate(t.access_token.expose()).await.unwrap();
    assert_eq!(
        (p.subject.as_str(), p.client_id.as_str()),
        ("alice", cid.as_str())
    );

    let t2 = h
        .refresh(&cid, secret.as_deref(), t.refresh_token.expose())
        .await
        .unwrap();
    assert_ne!(t2.refresh_token, t.refresh_token, "rotated");
    assert!(v.validate(t2.access_token.expose()).await.is_ok());

    let revoke = q(&[
        ("token", t2.refresh_token.expose()),
        ("client_id", &cid),
        ("client_secret", secret.as_deref().unwrap()),
    ]);
    h.s.revoke(&revoke, None, None).await.unwrap();
    assert!(
        matches!(
            v.validate(t2.access_token.expose()).await,
            Err(ValidationError::Invalid)
        ),
        "family revoked"
    );
    assert!(
        h.refresh(&cid, secret.as_deref(), t2.refresh_token.expose())
            .await
            .is_err()
    );
}

#[tokio::test]
async fn public_client_with_loopback_port_and_basic_auth_client() {
    let h = harness().await;
    let (cid, none) = h.register("none").await;
    assert!(none.is_none());
    let query = h.auth_query(&cid, &[("redirect_uri", "http://localhost:53682/callback")]);
    let AuthorizeOutcome::Redirect { location } = h.decide(&query, "approve").await else {
        panic!()
    };
    assert!(location.starts_with("http://localhost:53682/callback?code="));
    let code = get(&query_of(&location), "code").unwrap().to_owned();
    let p = q(&[
        ("grant_type", "authorization_code"),
        ("code", &code),
        ("redirect_uri", "http://localhost:53682/callback"),
        ("code_verifier", VERIFIER),
        ("client_id", &cid),
    ]);
    assert!(h.s.token(&p, None, None).await.is_ok());

    let (cid, secret) = h.register("client_secret_basic").await;
    let code = h.code(&cid).await;
    let basic = format!(
        "Basic {}",
        base64::engine::general_purpose::STANDARD.encode(format!("{cid}:{}", secret.unwrap()))
    );
    let p = q(&[
        ("grant_type", "authorization_code"),
        ("code", &code),
        ("redirect_uri", CALLBACK),
        ("code_verifier", VERIFIER),
    ]);
    assert!(h.s.token(&p, Some(&basic), None).await.is_ok());
}

#[tokio::test]
async fn pkce_missing_plain_wrong_and_verifier_without_challenge() {
    let h = harness().await;
    let (cid, _) = h.register("none").await;
    let missing =
        h.s.authorize_get(
            &h.auth_query(
                &cid,
                &[("code_challenge", ""), ("code_challenge_method", "")],
            ),
            None,
            None,
        )
        .await;
    assert_eq!(redirect_error(&missing.outcome), "invalid_request");
    let plain =
        h.s.authorize_get(
            &h.auth_query(
                &cid,
                &[
                    ("code_challenge", VERIFIER),
                    ("code_challenge_method", "plain"),
                ],
            ),
            None,
            None,
        )
        .await;
    assert_eq!(redirect_error(&plain.outcome), "invalid_request");
    // verifier without challenge: no code is ever issued without one, so a verifier has
    // nothing to redeem
    assert!(missing.set_session.is_none());
    assert_eq!(
        h.exchange(&cid, None, "pfac_never-issued", VERIFIER)
            .await
            .unwrap_err()
            .code(),
        "invalid_grant"
    );
    let code = h.code(&cid).await;
    let wrong = "x".repeat(43);
    assert_eq!(
        h.exchange(&cid, None, &code, &wrong)
            .await
            .unwrap_err()
            .code(),
        "invalid_grant"
    );
}

#[tokio::test]
async fn unregistered_redirect_and_unknown_client_show_error_page() {
    let h = harness().await;
    let (cid, _) = h.register("none").await;
    let r =
        h.s.authorize_get(
            &h.auth_query(&cid, &[("redirect_uri", "https://evil.example/cb")]),
            None,
            None,
        )
        .await;
    assert!(is_error_page(&r.outcome));
    let r =
        h.s.authorize_get(&h.auth_query("pfc_unknown", &[]), None, None)
            .await;
    assert!(is_error_page(&r.outcome));
}

#[tokio::test]
async fn non_loopback_http_redirect_refused_at_registration() {
    let h = harness().await;
    let body = json!({"redirect_uris": ["http://evil.example/cb"]});
    assert_eq!(
        h.s.register(body.to_string().as_bytes(), None)
            .await
            .unwrap_err()
            .code(),
        "invalid_redirect_uri"
    );
}

#[tokio::test]
async fn code_replay_revokes_its_tokens() {
    let h = harness().await;
    let (cid, _) = h.register("none").await;
    let code = h.code(&cid).await;
    let t = h.exchange(&cid, None, &code, VERIFIER).await.unwrap();
    let v = h.s.validator();
    assert!(v.validate(t.access_token.expose()).await.is_ok());
    assert_eq!(
        h.exchange(&cid, None, &code, VERIFIER)
            .await
            .unwrap_err()
            .code(),
        "invalid_grant"
    );
    assert!(matches!(
        v.validate(t.access_token.expose()).await,
        Err(ValidationError::Invalid)
    ));
    assert_eq!(
        h.refresh(&cid, None, t.refresh_token.expose())
            .await
            .unwrap_err()
            .code(),
        "invalid_grant"
    );
}

#[tokio::test]
async fn code_expires_after_60_seconds() {
    let h = harness().await;
    let (cid, _) = h.register("none").await;
    let code = h.code(&cid).await;
    h.clock.advance(Duration::from_secs(60));
    assert_eq!(
        h.exchange(&cid, None, &code, VERIFIER)
            .await
            .unwrap_err()
            .code(),
        "invalid_grant"
    );
}

#[tokio::test]
async fn code_bound_to_client() {
    let h = harness().await;
    let (cid, _) = h.register("none").await;
    let (other, _) = h.register("none").await;
    let code = h.code(&cid).await;
    assert_eq!(
        h.exchange(&other, None, &code, VERIFIER)
            .await
            .unwrap_err()
            .code(),
        "invalid_grant"
    );
}

#[tokio::test]
async fn refresh_reuse_inside_grace_returns_same_pair() {
    let h = harness().await;
    let (cid, _) = h.register("none").await;
    let t = h
        .exchange(&cid, None, &h.code(&cid).await, VERIFIER)
        .await
        .unwrap();
    let a = h
        .refresh(&cid, None, t.refresh_token.expose())
        .await
        .unwrap();
    h.clock.advance(Duration::from_secs(30));
    let b = h
        .refresh(&cid, None, t.refresh_token.expose())
        .await
        .unwrap();
    assert_eq!(a.access_token, b.access_token);
    assert_eq!(a.refresh_token, b.refresh_token);
    assert_eq!(b.expires_in, 3600 - 30);
    assert!(
        h.s.validator()
            .validate(b.access_token.expose())
            .await
            .is_ok()
    );
    // the successor still rotates normally
    assert!(
        h.refresh(&cid, None, b.refresh_token.expose())
            .await
            .is_ok()
    );
}

#[tokio::test]
async fn refresh_reuse_after_grace_revokes_family() {
    let h = harness().await;
    let (cid, _) = h.register("none").await;
    let t = h
        .exchange(&cid, None, &h.code(&cid).await, VERIFIER)
        .await
        .unwrap();
    let a = h
        .refresh(&cid, None, t.refresh_token.expose())
        .await
        .unwrap();
    h.clock.advance(Duration::from_secs(31));
    assert_eq!(
        h.refresh(&cid, None, t.refresh_token.expose())
            .await
            .unwrap_err()
            .code(),
        "invalid_grant"
    );
    assert!(matches!(
        h.s.validator().validate(a.access_token.expose()).await,
        Err(ValidationError::Invalid)
    ));
    assert_eq!(
        h.refresh(&cid, None, a.refresh_token.expose())
            .await
            .unwrap_err()
            .code(),
        "invalid_grant"
    );
}

#[tokio::test]
async fn wrong_client_secret_is_401_invalid_client() {
    let h = harness().await;
    let (cid, _) = h.register("client_secret_post").await;
    let code = h.code(&cid).await;
    let e = h
        .exchange(&cid, Some("pfcs_wrong"), &code, VERIFIER)
        .await
        .unwrap_err();
    assert!(matches!(e, OAuthError::InvalidClient(_)));
    let e = h
        .exchange("pfc_unknown", None, &code, VERIFIER)
        .await
        .unwrap_err();
    assert!(matches!(e, OAuthError::InvalidClient(_)));
}

#[tokio::test]
async fn wrong_resource_is_invalid_target() {
    let h = harness().await;
    let (cid, _) = h.register("none").await;
    let r =
        h.s.authorize_get(
            &h.auth_query(&cid, &[("resource", "https://elsewhere.example/mcp")]),
            None,
            None,
        )
        .await;
    assert_eq!(redirect_error(&r.outcome), "invalid_target");
    let code = h.code(&cid).await;
    let p = q(&[
        ("grant_type", "authorization_code"),
        ("code", &code),
        ("redirect_uri", CALLBACK),
        ("code_verifier", VERIFIER),
        ("client_id", &cid),
        ("resource", "https://elsewhere.example/mcp"),
    ]);
    assert_eq!(
        h.s.token(&p, None, None).await.unwrap_err().code(),
        "invalid_target"
    );
}

#[tokio::test]
async fn unknown_scope_is_invalid_scope_and_subset_is_kept() {
    let h = harness().await;
    let (cid, _) = h.register("none").await;
    let r =
        h.s.authorize_get(
            &h.auth_query(&cid, &[("scope", "mcp:read admin")]),
            None,
            None,
        )
        .await;
    assert_eq!(redirect_error(&r.outcome), "invalid_scope");
    let AuthorizeOutcome::Redirect { location } = h
        .decide(&h.auth_query(&cid, &[("scope", "mcp:read")]), "approve")
        .await
    else {
        panic!()
    };
    let code = get(&query_of(&location), "code").unwrap().to_owned();
    let t = h.exchange(&cid, None, &code, VERIFIER).await.unwrap();
    assert_eq!(t.scope, "mcp:read");
    let e =
        h.s.token(
            &q(&[
                ("grant_type", "refresh_token"),
                ("refresh_token", t.refresh_token.expose()),
                ("client_id", &cid),
                ("scope", "mcp:write"),
            ]),
            None,
            None,
        )
        .await;
    assert_eq!(
        e.unwrap_err().code(),
        "invalid_scope",
        "refresh never widens"
    );
}

#[tokio::test]
async fn csrf_missing_or_wrong_gives_no_code() {
    let h = harness().await;
    let (cid, _) = h.register("none").await;
    let (cookie, _csrf, request) = h
        .login(&h.auth_query(&cid, &[]), "correct horse")
        .await
        .unwrap();
    for body in [
        q(&[
            ("step", "consent"),
            ("request", &request),
            ("decision", "approve"),
        ]),
        q(&[
            ("step", "consent"),
            ("csrf", "forged"),
            ("request", &request),
            ("decision", "approve"),
        ]),
    ] {
        let out = h.s.authorize_post(&body, Some(&cookie), None).await.outcome;
        assert!(
            matches!(
                out,
                AuthorizeOutcome::Page {
                    status: 403,
                    page: Page::Error(_)
                }
            ),
            "{out:?}"
        );
    }
    // without a session cookie at all
    let out =
        h.s.authorize_post(
            &q(&[("step", "consent"), ("request", &request)]),
            None,
            None,
        )
        .await
        .outcome;
    assert!(matches!(out, AuthorizeOutcome::Page { status: 403, .. }));
}

#[tokio::test]
async fn wrong_password_gives_no_code() {
    let h = harness().await;
    let (cid, _) = h.register("none").await;
    let out = h
        .login(&h.auth_query(&cid, &[]), "wrong password")
        .await
        .unwrap_err();
    match out {
        AuthorizeOutcome::Page {
            page: Page::Login(l),
            status: 401,
        } => {
            assert_eq!(l.error.as_deref(), Some("Wrong username or password."));
        }
        other => panic!("{other:?}"),
    }
}

#[tokio::test]
async fn deny_is_access_denied() {
    let h = harness().await;
    let (cid, _) = h.register("none").await;
    let out = h.decide(&h.auth_query(&cid, &[]), "deny").await;
    assert_eq!(redirect_error(&out), "access_denied");
}

#[tokio::test]
async fn expired_and_revoked_access_tokens() {
    let h = harness().await;
    let (cid, _) = h.register("none").await;
    let t = h
        .exchange(&cid, None, &h.code(&cid).await, VERIFIER)
        .await
        .unwrap();
    let v = h.s.validator();
    h.clock.advance(Duration::from_secs(3600));
    assert!(matches!(
        v.validate(t.access_token.expose()).await,
        Err(ValidationError::Expired)
    ));

    let t = h
        .refresh(&cid, None, t.refresh_token.expose())
        .await
        .unwrap();
    assert!(v.validate(t.access_token.expose()).await.is_ok());
    h.s.revoke(
        &q(&[("token", t.access_token.expose()), ("client_id", &cid)]),
        None,
        None,
    )
    .await
    .unwrap();
    assert!(matches!(
        v.validate(t.access_token.expose()).await,
        Err(ValidationError::Invalid)
    ));
    // the refresh token survives an access-token revocation
    assert!(
        h.refresh(&cid, None, t.refresh_token.expose())
            .await
            .is_ok()
    );
    // unknown tokens: 200
    h.s.revoke(
        &q(&[("token", "nonsense"), ("client_id", &cid)]),
        None,
        None,
    )
    .await
    .unwrap();
}

#[tokio::test]
async fn cimd_client_flow_and_lying_document() {
    let id = "https://app.example/oauth/client.json";
    let honest = Arc::new(Docs(
        json!({"client_id": id, "client_name": "App", "redirect_uris": ["http://127.0.0.1/callback"]}),
    ));
    let h = harness_with(config(), Some(honest)).await;
    let query = h.auth_query(id, &[("redirect_uri", "http://127.0.0.1:8765/callback")]);
    let AuthorizeOutcome::Redirect { location } = h.decide(&query, "approve").await else {
        panic!()
    };
    let code = get(&query_of(&location), "code").unwrap().to_owned();
    let p = q(&[
        ("grant_type", "authorization_code"),
        ("code", &code),
        ("redirect_uri", "http://127.0.0.1:8765/callback"),
        ("code_verifier", VERIFIER),
        ("client_id", id),
    ]);
    assert!(h.s.token(&p, None, None).await.is_ok());
    // its redirect URIs are enforced
    let r =
        h.s.authorize_get(
            &h.auth_query(id, &[("redirect_uri", "https://evil.example/cb")]),
            None,
            None,
        )
        .await;
    assert!(is_error_page(&r.outcome));

    let liar = Arc::new(Docs(
        json!({"client_id": "https://evil.example/c.json", "redirect_uris": ["http://127.0.0.1/callback"]}),
    ));
    let h = harness_with(config(), Some(liar)).await;
    let r =
        h.s.authorize_get(
            &h.auth_query(id, &[("redirect_uri", "http://127.0.0.1/callback")]),
            None,
            None,
        )
        .await;
    assert!(is_error_page(&r.outcome));
}

#[tokio::test]
async fn cimd_private_address_is_refused() {
    let h = harness().await; // the real https fetcher, private addresses not allowed
    let id = "https://localhost/client.json";
    let r =
        h.s.authorize_get(
            &h.auth_query(id, &[("redirect_uri", "http://127.0.0.1/callback")]),
            None,
            None,
        )
        .await;
    match r.outcome {
        AuthorizeOutcome::Page {
            page: Page::Error(e),
            ..
        } => {
            // The reason class only: no address, no resolver text (no DNS oracle).
            assert_eq!(
                e.message,
                "The application's metadata could not be fetched (fetch failed)."
            );
        }
        other => panic!("{other:?}"),
    }
}

/// A tiny deterministic generator for the property tests (xorshift64*).
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
}

fn ip(s: &str) -> Option<std::net::IpAddr> {
    Some(s.parse().unwrap())
}

/// A login form from `GET /authorize`: (anonymous cookie, csrf, request).
async fn login_form(h: &H, cid: &str, from: Option<std::net::IpAddr>) -> (String, String, String) {
    let r = h.s.authorize_get(&h.auth_query(cid, &[]), None, from).await;
    let cookie = r.set_session.clone().unwrap().0.expose().to_owned();
    let AuthorizeOutcome::Page {
        page: Page::Login(login),
        ..
    } = r.outcome
    else {
        panic!("{:?}", r.outcome)
    };
    (cookie, login.csrf, login.request)
}

async fn try_login(
    h: &H,
    form: &(String, String, String),
    user: &str,
    password: &str,
    from: Option<std::net::IpAddr>,
) -> AuthorizeResponse {
    let body = q(&[
        ("step", "login"),
        ("csrf", &form.1),
        ("request", &form.2),
        ("username", user),
        ("password", password),
    ]);
    h.s.authorize_post(&body, Some(&form.0), from).await
}

fn status(r: &AuthorizeResponse) -> u16 {
    match &r.outcome {
        AuthorizeOutcome::Page { status, .. } => *status,
        AuthorizeOutcome::Redirect { .. } => 303,
    }
}

/// Property: however many wrong passwords one IP sends for a user, at whatever pace, the right
/// password from another IP always works; and every 429 says when to retry.
#[tokio::test]
async fn wrong_passwords_from_one_ip_never_lock_the_user_out_elsewhere() {
    let h = harness().await;
    let (cid, _) = h.register("none").await;
    let attacker = ip("198.51.100.66");
    let attack_form = login_form(&h, &cid, attacker).await;
    let mut rng = Rng(0x9e37_79b9_7f4a_7c15);
    let mut refused = 0;
    for round in 0..40 {
        for _ in 0..rng.below(30) {
            let r = try_login(&h, &attack_form, "alice", "guess", attacker).await;
            match status(&r) {
                401 => {}
                429 => {
                    refused += 1;
                    assert!(r.retry_after.is_some_and(|s| s >= 1), "Retry-After on 429");
                }
                other => panic!("attacker got {other}"),
            }
            h.clock.advance(Duration::from_millis(rng.below(3_000)));
        }
        let owner = ip(&format!("203.0.113.{}", 1 + round % 200));
        let form = login_form(&h, &cid, owner).await;
        let r = try_login(&h, &form, "alice", "correct horse", owner).await;
        assert_eq!(status(&r), 303, "round {round}: the owner signs in");
    }
    assert!(refused > 0, "the attacker was throttled");
}

/// A user signing in on six devices within a minute (one network) is never throttled: only
/// failures count.
#[tokio::test]
async fn six_successful_logins_within_a_minute_all_succeed() {
    let h = harness().await;
    let (cid, _) = h.register("none").await;
    let home = ip("192.0.2.10");
    for device in 0..6 {
        let form = login_form(&h, &cid, home).await;
        let r = try_login(&h, &form, "alice", "correct horse", home).await;
        assert_eq!(status(&r), 303, "device {device}");
        h.clock.advance(Duration::from_secs(5));
    }
    // A success resets its (user, IP) bucket: failures before it do not add up across it.
    let form = login_form(&h, &cid, home).await;
    for _ in 0..10 {
        for _ in 0..4 {
            assert_eq!(
                status(&try_login(&h, &form, "alice", "typo", home).await),
                401
            );
        }
        assert_eq!(
            status(&try_login(&h, &form, "alice", "correct horse", home).await),
            303
        );
        h.clock.advance(Duration::from_secs(30));
    }
}

/// Property: one IP never gets more than `burst + per_minute` password verifications in any
/// minute, whichever usernames it tries.
#[tokio::test]
async fn one_ip_cannot_try_more_than_n_passwords_a_minute_across_usernames() {
    let mut cfg = config();
    let quota = cfg.throttle.login_per_ip;
    cfg.throttle.authorize_per_ip = Quota {
        burst: 1000,
        per_minute: 1000,
    };
    let h = harness_with(cfg, None).await;
    let (cid, _) = h.register("none").await;
    let from = ip("2001:db8:7:7::1");
    let form = login_form(&h, &cid, from).await;
    let mut rng = Rng(42);
    let mut verified: Vec<u64> = Vec::new();
    for i in 0..400 {
        let user = format!("user{}", rng.below(1000));
        // Another address in the same /64 is the same client.
        let same_net = ip(&format!("2001:db8:7:7::{:x}", 1 + i));
        let r = try_login(&h, &form, &user, "password", same_net).await;
        match status(&r) {
            401 => verified.push(h.clock.now_ms()),
            429 => assert!(r.retry_after.is_some()),
            other => panic!("{other}"),
        }
        h.clock.advance(Duration::from_millis(rng.below(1_500)));
    }
    let n = (quota.burst + quota.per_minute) as usize;
    for (i, t) in verified.iter().enumerate() {
        let in_window = verified[i..]
            .iter()
            .take_while(|u| **u < t + 60_000)
            .count();
        assert!(
            in_window <= n,
            "{in_window} verifications within a minute (max {n})"
        );
    }
    assert!(verified.len() > n, "the budget refills");
}

/// Cookie-less `GET /authorize` stores nothing and is throttled per IP: 300 of them grow the
/// store by far less than 256 KiB and meet a 429 with `Retry-After`.
#[tokio::test]
async fn cookieless_authorize_gets_store_nothing_and_are_throttled() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("oauth.db");
    let store: Arc<dyn Store> = Arc::new(SqliteStore::open(&db).unwrap());
    let clock = Arc::new(ManualClock::at(Duration::from_secs(T0)));
    let limiter = Arc::new(TestLimiter::new(clock.clone()));
    let s = AuthServer::builder(config(), store.clone(), limiter)
        .clock(clock.clone())
        .build()
        .await
        .unwrap();
    Admin::new(store.clone())
        .with_hashing(CHEAP)
        .with_clock(clock.clone())
        .add_user("alice", &Secret::new("correct horse"))
        .await
        .unwrap();
    let h = H { s, clock, store };
    let (cid, _) = h.register("none").await;
    let size = || {
        ["oauth.db", "oauth.db-wal", "oauth.db-shm"]
            .iter()
            .map(|f| std::fs::metadata(dir.path().join(f)).map_or(0, |m| m.len()))
            .sum::<u64>()
    };
    let before = size();
    let from = ip("198.51.100.7");
    let mut throttled = 0;
    for _ in 0..300 {
        let r =
            h.s.authorize_get(&h.auth_query(&cid, &[]), None, from)
                .await;
        if status(&r) == 429 {
            throttled += 1;
            assert!(r.retry_after.is_some_and(|s| s >= 1));
        }
    }
    let grown = size().saturating_sub(before);
    assert!(grown < 256 * 1024, "store grew by {grown} bytes");
    assert!(throttled > 0, "300 GETs from one IP meet a 429");
    let other =
        h.s.authorize_get(&h.auth_query(&cid, &[]), None, ip("198.51.100.8"))
            .await;
    assert_eq!(status(&other), 200, "another IP is not affected");
    // The anonymous session still carries the login through.
    assert!(
        h.login(&h.auth_query(&cid, &[]), "correct horse")
            .await
            .is_ok()
    );
}

/// Metadata-document fetches have a budget per client IP, and a failed fetch is not repeated
/// for the same URL for a while.
#[tokio::test]
async fn cimd_fetches_are_budgeted_per_ip_and_failures_cached() {
    struct Refusing(std::sync::atomic::AtomicUsize);
    #[async_trait]
    impl DocumentFetcher for Refusing {
        async fn fetch(&self, _url: &Url) -> Result<FetchedDocument, CimdError> {
            self.0.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
            Err(CimdError::RefusedAddress("10.1.2.3".into()))
        }
    }
    let fetcher = Arc::new(Refusing(std::sync::atomic::AtomicUsize::new(0)));
    let mut cfg = config();
    cfg.throttle.cimd_fetch_per_ip = Quota {
        burst: 3,
        per_minute: 1,
    };
    let h = harness_with(cfg, Some(fetcher.clone())).await;
    let from = ip("198.51.100.9");
    let fetches = || fetcher.0.load(std::sync::atomic::Ordering::SeqCst);
    let query = |n: u32| {
        h.auth_query(
            &format!("https://app{n}.example/client.json"),
            &[("redirect_uri", "http://127.0.0.1/callback")],
        )
    };
    for _ in 0..5 {
        let r = h.s.authorize_get(&query(0), None, from).await;
        assert_eq!(status(&r), 400);
    }
    assert_eq!(fetches(), 1, "the failure is cached per URL");
    for n in 1..=2 {
        assert_eq!(status(&h.s.authorize_get(&query(n), None, from).await), 400);
    }
    assert_eq!(fetches(), 3);
    let r = h.s.authorize_get(&query(3), None, from).await;
    assert_eq!(status(&r), 429, "over the fetch budget");
    assert!(r.retry_after.is_some());
    assert_eq!(fetches(), 3, "no fetch over the budget");
    assert_eq!(
        status(
            &h.s.authorize_get(&query(3), None, ip("198.51.100.10"))
                .await
        ),
        400,
        "another IP has its own budget"
    );
}

#[tokio::test]
async fn registration_throttled_per_ip() {
    let mut cfg = config();
    cfg.throttle.register_per_ip = Quota {
        burst: 1,
        per_minute: 1,
    };
    let h = harness_with(cfg, None).await;
    let body = json!({"redirect_uris": [CALLBACK]}).to_string();
    let ip = Some("203.0.113.9".parse().unwrap());
    assert!(h.s.register(body.as_bytes(), ip).await.is_ok());
    assert!(matches!(
        h.s.register(body.as_bytes(), ip).await,
        Err(OAuthError::RateLimited { .. })
    ));
    assert!(
        h.s.register(body.as_bytes(), Some("203.0.113.10".parse().unwrap()))
            .await
            .is_ok()
    );
}

#[tokio::test]
async fn unused_clients_are_reaped() {
    let h = harness().await;
    let (idle, _) = h.register("none").await;
    h.clock.advance(Duration::from_secs(29 * 86_400));
    let (busy, _) = h.register("none").await;
    h.clock.advance(Duration::from_secs(2 * 86_400));
    let report = h.s.maintenance().await.unwrap();
    assert_eq!(report.clients_reaped, 1);
    assert!(h.store.get_client(&idle).await.unwrap().is_none());
    assert!(h.store.get_client(&busy).await.unwrap().is_some());
}

#[tokio::test]
async fn admin_remove_user_revokes_their_tokens() {
    let h = harness().await;
    let (cid, _) = h.register("none").await;
    let t = h
        .exchange(&cid, None, &h.code(&cid).await, VERIFIER)
        .await
        .unwrap();
    let admin = Admin::new(h.store.clone())
        .with_hashing(CHEAP)
        .with_clock(h.clock.clone());
    assert_eq!(
        admin.list_grants(&Default::default()).await.unwrap().len(),
        1
    );
    assert_eq!(
        admin
            .revoke_grants(&crate::admin::GrantFilter {
                username: Some("alice".into()),
                ..Default::default()
            })
            .await
            .unwrap(),
        1
    );
    assert!(
        h.s.validator()
            .validate(t.access_token.expose())
            .await
            .is_err()
    );
    assert!(
        admin
            .list_grants(&Default::default())
            .await
            .unwrap()
            .is_empty()
    );
    admin.remove_user("alice").await.unwrap();
    assert!(admin.remove_user("alice").await.is_err());
    assert!(
        admin
            .add_user("bad name!", &Secret::new("long enough"))
            .await
            .is_err()
    );
    assert!(admin.add_user("bob", &Secret::new("short")).await.is_err());
}

/// Step-up: a client holding `mcp:read` asks again for `mcp:read mcp:write`; the consent page
/// shows what is being added apart from what is already allowed, and the new grant and its
/// tokens carry the larger scope.
#[tokio::test]
async fn step_up_consent_shows_the_added_scope_and_widens_the_grant() {
    let h = harness().await;
    let (cid, _) = h.register("none").await;
    let approve = |cookie: String, csrf: String, request: String| {
        let body = q(&[
            ("step", "consent"),
            ("csrf", &csrf),
            ("request", &request),
            ("decision", "approve"),
        ]);
        let s = h.s.clone();
        async move { s.authorize_post(&body, Some(&cookie), None).await.outcome }
    };
    let code_of = |out: AuthorizeOutcome| match out {
        AuthorizeOutcome::Redirect { location } => {
            get(&query_of(&location), "code").unwrap().to_owned()
        }
        other => panic!("{other:?}"),
    };
    let read_only = h.auth_query(&cid, &[("scope", "mcp:read")]);
    let (cookie, csrf, request) = h.login(&read_only, "correct horse").await.unwrap();
    let code = code_of(approve(cookie.clone(), csrf, request).await);
    let t = h.exchange(&cid, None, &code, VERIFIER).await.unwrap();
    assert_eq!(t.scope, "mcp:read");

    let wider = h.auth_query(&cid, &[("scope", "mcp:read mcp:write")]);
    let r = h.s.authorize_get(&wider, Some(&cookie), None).await;
    let AuthorizeOutcome::Page {
        page: Page::Consent(c),
        ..
    } = r.outcome
    else {
        panic!("{:?}", r.outcome)
    };
    assert_eq!(c.already_granted, ["mcp:read"]);
    let html = crate::pages::consent(&c);
    assert!(
        html.contains("adds: <code>mcp:write</code> — use tools that make changes"),
        "{html}"
    );
    assert!(html.contains("Already allowed:"), "{html}");
    let added_at = html.find("adds:").unwrap();
    let kept_at = html.find("Already allowed:").unwrap();
    assert!(added_at < kept_at, "the addition comes first");
    let code = code_of(approve(cookie, c.csrf, c.request).await);
    let t = h.exchange(&cid, None, &code, VERIFIER).await.unwrap();
    assert_eq!(t.scope, "mcp:read mcp:write");
    let p =
        h.s.validator()
            .validate(t.access_token.expose())
            .await
            .unwrap();
    assert!(p.scopes.iter().any(|s| s == "mcp:write"), "{:?}", p.scopes);
}

/// Records every event the server reports.
#[derive(Default)]
struct Seen(std::sync::Mutex<Vec<crate::observe::Event>>);

impl crate::observe::Observer for Seen {
    fn event(&self, event: crate::observe::Event) {
        self.0.lock().unwrap().push(event);
    }
}

impl Seen {
    fn take(&self) -> Vec<crate::observe::Event> {
        std::mem::take(&mut *self.0.lock().unwrap())
    }
}

#[tokio::test]
async fn the_observer_sees_each_event_once() {
    use crate::observe::Event::*;
    let store: Arc<dyn Store> = Arc::new(SqliteStore::in_memory().unwrap());
    let clock = Arc::new(ManualClock::at(Duration::from_secs(T0)));
    let seen = Arc::new(Seen::default());
    let limiter = Arc::new(TestLimiter::new(clock.clone()));
    let s = AuthServer::builder(config(), store.clone(), limiter)
        .clock(clock.clone())
        .observer(seen.clone())
        .build()
        .await
        .unwrap();
    Admin::new(store.clone())
        .with_hashing(CHEAP)
        .with_clock(clock.clone())
        .add_user("alice", &Secret::new("correct horse"))
        .await
        .unwrap();
    let h = H { s, clock, store };
    let (cid, _) = h.register("none").await;
    let form = login_form(&h, &cid, None).await;
    assert_eq!(
        status(&try_login(&h, &form, "alice", "guess", None).await),
        401
    );
    let code = h.code(&cid).await;
    let t = h.exchange(&cid, None, &code, VERIFIER).await.unwrap();
    let v = h.s.validator();
    v.validate(t.access_token.expose()).await.unwrap();
    v.validate(t.access_token.expose()).await.unwrap();
    let a = h
        .refresh(&cid, None, t.refresh_token.expose())
        .await
        .unwrap();
    let revoke = q(&[("token", a.access_token.expose()), ("client_id", &cid)]);
    h.s.revoke(&revoke, None, None).await.unwrap();
    assert!(h.exchange(&cid, None, &code, VERIFIER).await.is_err());
    assert_eq!(
        seen.take(),
        [
            ClientRegistered,
            LoginFailed,
            LoginSucceeded,
            CodeIssued,
            TokensIssued,
            ValidationCacheMiss,
            ValidationCacheHit,
            TokensRefreshed,
            Revoked,
            ReuseDetected,
        ]
    );
    let form = login_form(&h, &cid, ip("198.51.100.7")).await;
    let mut last = 0;
    for _ in 0..50 {
        last = status(&try_login(&h, &form, "alice", "guess", ip("198.51.100.7")).await);
        if last == 429 {
            break;
        }
    }
    assert_eq!(last, 429);
    assert_eq!(seen.take().last(), Some(&LoginThrottled));
}

const NOTES: &str = "https://gw.example/notes/mcp";
const PLANS: &str = "https://gw.example/plans/mcp";

/// Two protected resources (two routes); the default `<issuer>/mcp` is not among them.
fn two_resources() -> OAuthConfig {
    let mut cfg = config();
    cfg.resources = [("notes", NOTES), ("plans", PLANS)]
        .iter()
        .map(|(name, url)| crate::config::ResourceEntry {
            url: (*url).into(),
            name: (*name).into(),
            roles: Vec::new(),
            users: Vec::new(),
            title: None,
        })
        .collect();
    cfg
}

impl H {
    /// The consent page for `query` after logging in.
    async fn consent_view(&self, query: &str) -> crate::pages::ConsentView {
        let (cookie, _, _) = self.login(query, "correct horse").await.unwrap();
        match self
            .s
            .authorize_get(query, Some(&cookie), None)
            .await
            .outcome
        {
            AuthorizeOutcome::Page {
                page: Page::Consent(c),
                ..
            } => *c,
            other => panic!("{other:?}"),
        }
    }

    async fn code_for(&self, client_id: &str, resource: &str) -> String {
        let query = self.auth_query(client_id, &[("resource", resource)]);
        let AuthorizeOutcome::Redirect { location } = self.decide(&query, "approve").await else {
            panic!("no redirect")
        };
        get(&query_of(&location), "code").unwrap().to_owned()
    }

    async fn exchange_for(
        &self,
        client_id: &str,
        code: &str,
        resource: &str,
    ) -> Result<crate::protocol::token::TokenResponse, OAuthError> {
        let p = q(&[
            ("grant_type", "authorization_code"),
            ("code", code),
            ("redirect_uri", CALLBACK),
            ("code_verifier", VERIFIER),
            ("client_id", client_id),
            ("resource", resource),
        ]);
        self.s.token(&p, None, None).await
    }

    async fn refresh_for(
        &self,
        client_id: &str,
        rt: &str,
        resource: &str,
    ) -> Result<crate::protocol::token::TokenResponse, OAuthError> {
        let p = q(&[
            ("grant_type", "refresh_token"),
            ("refresh_token", rt),
            ("client_id", client_id),
            ("resource", resource),
        ]);
        self.s.token(&p, None, None).await
    }
}

#[tokio::test]
async fn two_resources_code_token_and_refresh_stay_bound_to_one() {
    let h = harness_with(two_resources(), None).await;
    let (cid, _) = h.register("none").await;
    let code = h.code_for(&cid, NOTES).await;
    let t = h.exchange_for(&cid, &code, NOTES).await.unwrap();
    // the token's audience is the requested resource
    let (rec, _) = h
        .store
        .get_access(&crypto::hash_secret(t.access_token.expose()))
        .await
        .unwrap()
        .unwrap();
    assert_eq!(rec.resource, NOTES);
    let v = h.s.validator();
    let p = v.validate(t.access_token.expose()).await.unwrap();
    assert_eq!(p.resource, NOTES);

    // a refresh for the other resource is refused, the token stays usable
    let e = h
        .refresh_for(&cid, t.refresh_token.expose(), PLANS)
        .await
        .unwrap_err();
    assert_eq!(e.code(), "invalid_target");
    // a refresh without `resource` keeps it
    let t2 = h
        .refresh(&cid, None, t.refresh_token.expose())
        .await
        .unwrap();
    let p2 = v.validate(t2.access_token.expose()).await.unwrap();
    assert_eq!(p2.resource, NOTES);
    // and naming it (non-canonically) works too
    let t3 = h
        .refresh_for(
            &cid,
            t2.refresh_token.expose(),
            "HTTPS://gw.example/notes/mcp/",
        )
        .await
        .unwrap();
    assert_eq!(
        v.validate(t3.access_token.expose()).await.unwrap().resource,
        NOTES
    );

    // a code for PLANS exchanged naming NOTES: invalid_target; naming none: PLANS
    let code = h.code_for(&cid, PLANS).await;
    assert_eq!(
        h.exchange_for(&cid, &code, NOTES).await.unwrap_err().code(),
        "invalid_target"
    );
    let t = h.exchange(&cid, None, &code, VERIFIER).await.unwrap();
    assert_eq!(
        v.validate(t.access_token.expose()).await.unwrap().resource,
        PLANS
    );
}

#[tokio::test]
async fn two_resources_unknown_or_missing_resource_is_invalid_target() {
    let h = harness_with(two_resources(), None).await;
    let (cid, _) = h.register("none").await;
    for resource in ["https://gw.example/other/mcp", "https://gw.example/mcp", ""] {
        let r =
            h.s.authorize_get(&h.auth_query(&cid, &[("resource", resource)]), None, None)
                .await;
        assert_eq!(redirect_error(&r.outcome), "invalid_target", "{resource:?}");
    }
    // an untrusted redirect URI: an error page, never a redirect
    let r =
        h.s.authorize_get(
            &h.auth_query(
                &cid,
                &[
                    ("resource", "https://gw.example/other/mcp"),
                    ("redirect_uri", "https://evil.example/cb"),
                ],
            ),
            None,
            None,
        )
        .await;
    assert!(is_error_page(&r.outcome));
    let code = h.code_for(&cid, NOTES).await;
    assert_eq!(
        h.exchange_for(&cid, &code, "https://gw.example/other/mcp")
            .await
            .unwrap_err()
            .code(),
        "invalid_target"
    );
    // the failed exchange did not use the code up
    let t = h.exchange_for(&cid, &code, NOTES).await.unwrap();
    assert_eq!(
        h.refresh_for(
            &cid,
            t.refresh_token.expose(),
            "https://gw.example/other/mcp"
        )
        .await
        .unwrap_err()
        .code(),
        "invalid_target"
    );
}

#[tokio::test]
async fn consent_page_names_the_resource_and_counts_grants_per_resource() {
    let h = harness_with(two_resources(), None).await;
    let (cid, _) = h.register("none").await;
    let view = h
        .consent_view(&h.auth_query(&cid, &[("resource", PLANS)]))
        .await;
    assert_eq!(
        (view.resource_name.as_str(), view.resource_url.as_str()),
        ("plans", PLANS)
    );
    let html = crate::pages::consent(&view);
    assert!(
        html.contains("wants access to <strong>plans</strong>"),
        "{html}"
    );
    assert!(html.contains(PLANS));

    let code = h.code_for(&cid, NOTES).await;
    h.exchange_for(&cid, &code, NOTES).await.unwrap();
    let notes = h
        .consent_view(&h.auth_query(&cid, &[("resource", NOTES)]))
        .await;
    assert_eq!(notes.already_granted, ["mcp:read", "mcp:write"]);
    let plans = h
        .consent_view(&h.auth_query(&cid, &[("resource", PLANS)]))
        .await;
    assert!(
        plans.already_granted.is_empty(),
        "a grant for notes is not one for plans"
    );
}

#[tokio::test]
async fn single_resource_consent_names_mcp() {
    let h = harness().await;
    let (cid, _) = h.register("none").await;
    let view = h
        .consent_view(&h.auth_query(&cid, &[("resource", "")]))
        .await;
    assert_eq!(
        (view.resource_name.as_str(), view.resource_url.as_str()),
        ("mcp", "https://gw.example/mcp")
    );
}

#[tokio::test]
async fn a_resource_removed_from_the_config_yields_no_more_tokens() {
    let h = harness_with(two_resources(), None).await;
    let (cid, _) = h.register("none").await;
    let code = h.code_for(&cid, NOTES).await;
    let t = h.exchange_for(&cid, &code, NOTES).await.unwrap();
    let mut cfg = two_resources();
    cfg.resources.retain(|e| e.url == PLANS);
    let limiter = Arc::new(TestLimiter::new(h.clock.clone()));
    let s = AuthServer::builder(cfg, h.store.clone(), limiter)
        .clock(h.clock.clone())
        .build()
        .await
        .unwrap();
    assert!(matches!(
        s.validator().validate(t.access_token.expose()).await,
        Err(ValidationError::Invalid)
    ));
    let p = q(&[
        ("grant_type", "refresh_token"),
        ("refresh_token", t.refresh_token.expose()),
        ("client_id", &cid),
    ]);
    assert_eq!(
        s.token(&p, None, None).await.unwrap_err().code(),
        "invalid_grant"
    );
}

/// Review finding "DCR is open": however many clients one user registers, they hold at most
/// `max_grants_per_user` grants; the next consent is a page that says why, and a revoked grant
/// makes room again.
#[tokio::test]
async fn a_user_holds_at_most_max_grants() {
    let mut cfg = config();
    cfg.max_grants_per_user = 2;
    let h = harness_with(cfg, None).await;
    for _ in 0..2 {
        let (cid, secret) = h.register("client_secret_post").await;
        let code = h.code(&cid).await;
        h.exchange(&cid, secret.as_deref(), &code, VERIFIER)
            .await
            .unwrap();
    }
    let (cid, _) = h.register("client_secret_post").await;
    let out = h.decide(&h.auth_query(&cid, &[]), "approve").await;
    let AuthorizeOutcome::Page {
        page: Page::Error(e),
        status,
    } = out
    else {
        panic!("{out:?}")
    };
    assert_eq!(status, 403);
    assert!(e.message.contains("2 connected apps"), "{}", e.message);
    let grants = h.store.list_grants().await.unwrap();
    h.store
        .revoke_grant(&grants[0].family_id, T0)
        .await
        .unwrap();
    h.code(&cid).await;
}

#[tokio::test]
async fn jwt_bearer_without_a_trusted_idp_is_unsupported_and_with_one_names_the_issuer() {
    let h = harness().await;
    let (cid, _) = h.register("none").await;
    let p = q(&[
        ("grant_type", "urn:ietf:params:oauth:grant-type:jwt-bearer"),
        ("assertion", "eyJ.eyJ.sig"),
        ("client_id", &cid),
    ]);
    assert_eq!(
        h.s.token_endpoint(&p, None, None).await.unwrap_err().code(),
        "unsupported_grant_type"
    );
    let mut cfg = config();
    cfg.enterprise = vec![crate::config::EnterpriseIdp {
        issuer: "https://idp.example".into(),
        ..Default::default()
    }];
    let h = harness_with(cfg, None).await;
    let (cid, _) = h.register("none").await;
    let p = q(&[
        ("grant_type", "urn:ietf:params:oauth:grant-type:jwt-bearer"),
        ("assertion", "not-a-jwt"),
        ("client_id", &cid),
    ]);
    let err = h.s.token_endpoint(&p, None, None).await.unwrap_err();
    assert_eq!(err.code(), "invalid_grant");
    assert!(err.description().contains("not a signed JWT"), "{err}");
}

/// The `/account` page of the session `cookie`.
async fn account_view(h: &H, cookie: &str) -> crate::pages::account::AccountView {
    match h.s.account_get("", Some(cookie)).await.outcome {
        AuthorizeOutcome::Page {
            page: Page::Account(v),
            ..
        } => *v,
        other => panic!("{other:?}"),
    }
}

/// Where a POST to `/account` sent the browser.
async fn account_post(h: &H, cookie: &str, pairs: &[(&str, &str)]) -> String {
    match h
        .s
        .account_post(&q(pairs), Some(cookie), None)
        .await
        .outcome
    {
        AuthorizeOutcome::Redirect { location } => location,
        AuthorizeOutcome::Page { status, .. } => format!("page {status}"),
    }
}

#[tokio::test]
async fn account_lists_revokes_and_changes_the_password_of_the_signed_in_user_only() {
    let mut cfg = two_resources();
    cfg.resources[0].title = Some("Team notes".into());
    cfg.display_name = Some("Acme".into());
    let h = harness_with(cfg, None).await;
    let (cid, _) = h.register("none").await;
    let view = h
        .consent_view(&h.auth_query(&cid, &[("resource", NOTES)]))
        .await;
    assert_eq!(
        (view.resource_name.as_str(), view.deployment.as_str()),
        ("Team notes", "Acme")
    );
    let code = h.code_for(&cid, NOTES).await;
    let tokens = h.exchange_for(&cid, &code, NOTES).await.unwrap();

    // Without a session: the sign-in form, with an anonymous cookie and its CSRF token.
    let r = h.s.account_get("", None).await;
    let anon = r.set_session.unwrap().0.expose().to_owned();
    let AuthorizeOutcome::Page {
        page: Page::AccountLogin(login),
        ..
    } = r.outcome
    else {
        panic!("no sign-in form")
    };
    assert_eq!(
        account_post(
            &h,
            &anon,
            &[
                ("step", "login"),
                ("csrf", "forged"),
                ("username", "alice"),
                ("password", "correct horse")
            ]
        )
        .await,
        "page 403"
    );
    let r =
        h.s.account_post(
            &q(&[
                ("step", "login"),
                ("csrf", &login.csrf),
                ("username", "alice"),
                ("password", "correct horse"),
            ]),
            Some(&anon),
            None,
        )
        .await;
    let session = r.set_session.unwrap().0.expose().to_owned();
    let csrf = h.s.key.csrf_token(&session);

    let v = account_view(&h, &session).await;
    assert_eq!(v.grants.len(), 1);
    let g = &v.grants[0];
    assert_eq!(
        (g.route.as_str(), g.how.as_str(), g.client_name.as_str()),
        ("Team notes", "consent", "Claude")
    );
    assert!(!v.admin && !v.all_users);

    // Another user's grant cannot be revoked from this session; an unknown one neither.
    let other = crate::store::suite::grant("bobs", &cid, "bob");
    h.store
        .create_access_grant(&other, &crate::store::suite::access("bob-a", &other))
        .await
        .unwrap();
    let not_yours = [
        ("step", "revoke"),
        ("csrf", csrf.as_str()),
        ("grant", "bobs"),
    ];
    assert_eq!(
        account_post(&h, &session, &not_yours).await,
        "/account?done=not-yours"
    );
    assert!(
        h.store
            .get_grant("bobs")
            .await
            .unwrap()
            .unwrap()
            .revoked_at
            .is_none()
    );
    // Without the CSRF token nothing happens.
    let family = g.family_id.clone();
    let forged = [
        ("step", "revoke"),
        ("csrf", "x"),
        ("grant", family.as_str()),
    ];
    assert_eq!(account_post(&h, &session, &forged).await, "page 403");
    // Revoking one's own grant: its access token is refused at once.
    let revoke = [
        ("step", "revoke"),
        ("csrf", csrf.as_str()),
        ("grant", family.as_str()),
    ];
    assert_eq!(
        account_post(&h, &session, &revoke).await,
        "/account?done=revoked"
    );
    assert!(
        h.s.validator()
            .validate(tokens.access_token.expose())
            .await
            .is_err()
    );
    assert!(account_view(&h, &session).await.grants.is_empty());

    // The password: the current one is checked, then the new one works.
    let change = |current: &'static str| {
        [
            ("step", "password"),
            ("csrf", csrf.as_str()),
            ("current", current),
            ("new", "new horse battery"),
            ("confirm", "new horse battery"),
        ]
    };
    assert_eq!(
        account_post(&h, &session, &change("wrong")).await,
        "/account?done=wrong-password"
    );
    assert_eq!(
        account_post(&h, &session, &change("correct horse")).await,
        "/account?done=password"
    );
    let user = h.store.get_user("alice").await.unwrap().unwrap();
    assert!(crate::crypto::verify_password(
        "new horse battery",
        &user.password_hash
    ));

    // As an admin the same session lists every user's grants and revokes another's.
    h.store.set_admin("alice", true, T0).await.unwrap();
    let all = match h
        .s
        .account_get("all=1&user=bob", Some(&session))
        .await
        .outcome
    {
        AuthorizeOutcome::Page {
            page: Page::Account(v),
            ..
        } => *v,
        other => panic!("{other:?}"),
    };
    assert!(all.admin && all.all_users);
    assert_eq!(all.grants.len(), 1);
    assert_eq!(all.grants[0].username, "bob");
    let theirs = [
        ("step", "revoke"),
        ("csrf", csrf.as_str()),
        ("grant", "bobs"),
    ];
    assert_eq!(
        account_post(&h, &session, &theirs).await,
        "/account?all=1&done=revoked"
    );
    assert!(
        h.store
            .get_grant("bobs")
            .await
            .unwrap()
            .unwrap()
            .revoked_at
            .is_some()
    );

    // Signing out ends the session.
    let out = [("step", "logout"), ("csrf", csrf.as_str())];
    assert_eq!(account_post(&h, &session, &out).await, "/account");
    assert!(matches!(
        h.s.account_get("", Some(&session)).await.outcome,
        AuthorizeOutcome::Page {
            page: Page::AccountLogin(_),
            ..
        }
    ));
}

#[tokio::test]
async fn account_of_a_provider_user_refuses_a_password_and_a_role_can_make_an_admin() {
    let mut cfg = two_resources();
    cfg.roles.insert(
        "it".into(),
        crate::config::Role {
            groups: vec!["it".into()],
            scopes: Some(vec![]),
            admin: true,
            ..Default::default()
        },
    );
    let h = harness_with(cfg, None).await;
    let kim = crate::model::UserRecord {
        username: "https://idp.example#kim".into(),
        password_hash: String::new(),
        created_at: 1,
        updated_at: 1,
        external: Some(crate::model::ExternalIdentity {
            provider: "Corp".into(),
            issuer: "https://idp.example".into(),
            subject: "kim".into(),
            email: Some("kim@example.com".into()),
            groups: vec!["it".into()],
            ..Default::default()
        }),
        admin: false,
    };
    assert!(h.store.create_user(&kim).await.unwrap());
    let session =
        h.s.new_session(kim.username.clone())
            .await
            .unwrap()
            .expose()
            .to_owned();
    let v = account_view(&h, &session).await;
    assert_eq!(v.provider.as_deref(), Some("Corp"));
    assert!(!v.has_password);
    assert!(v.admin, "the role `it` has admin = true");
    let csrf = h.s.key.csrf_token(&session);
    let change = [
        ("step", "password"),
        ("csrf", csrf.as_str()),
        ("new", "a new password here"),
        ("confirm", "a new password here"),
    ];
    assert_eq!(
        account_post(&h, &session, &change).await,
        "/account?done=external"
    );
    let stored = h.store.get_user(&kim.username).await.unwrap().unwrap();
    assert_eq!(stored.password_hash, "", "no password was set");
}

/// At start, a user an earlier version named `ISSUER#SUBJECT` is renamed to their verified
/// email with their grant and tokens, and linked by issuer + subject: their next sign-in (or an
/// ID-JAG) finds them. One whose email's name is taken keeps the old name, linked too.
#[tokio::test]
async fn issuer_subject_users_are_renamed_to_their_email_at_start() {
    use crate::model::{ExternalIdentity, UserRecord};
    let store: Arc<dyn Store> = Arc::new(SqliteStore::in_memory().unwrap());
    let legacy = |sub: &str, email: &str| UserRecord {
        username: format!("https://idp.example#{sub}"),
        password_hash: String::new(),
        created_at: 1,
        updated_at: 1,
        external: Some(ExternalIdentity {
            provider: "Corp".into(),
            issuer: "https://idp.example".into(),
            subject: sub.into(),
            email: Some(email.into()),
            ..Default::default()
        }),
        admin: true,
    };
    let ann = legacy("ann", "ann@example.com");
    assert!(store.create_user(&ann).await.unwrap());
    let g = crate::store::suite::grant("fam-ann", "c1", &ann.username);
    let a = crate::store::suite::access("acc-ann", &g);
    let r = crate::store::suite::refresh("ref-ann", &g, T0 + 1000);
    store
        .create_grant(crate::store::suite::issue(&g, &a, &r))
        .await
        .unwrap();
    let bob = legacy("bob", "bob@example.com");
    assert!(store.create_user(&bob).await.unwrap());
    assert!(
        store
            .create_user(&crate::store::suite::user("bob@example.com"))
            .await
            .unwrap()
    );

    let clock = Arc::new(ManualClock::at(Duration::from_secs(T0)));
    let limiter = Arc::new(TestLimiter::new(clock.clone()));
    AuthServer::builder(config(), store.clone(), limiter)
        .clock(clock)
        .build()
        .await
        .unwrap();

    let renamed = store.get_user("ann@example.com").await.unwrap().unwrap();
    assert!(renamed.admin, "the record moved whole");
    assert!(store.get_user(&ann.username).await.unwrap().is_none());
    assert_eq!(
        store.get_grant("fam-ann").await.unwrap().unwrap().username,
        "ann@example.com"
    );
    assert_eq!(
        store
            .get_access("acc-ann")
            .await
            .unwrap()
            .unwrap()
            .0
            .username,
        "ann@example.com"
    );
    let link = |sub: &str| super::person::identity_key("https://idp.example", sub);
    assert_eq!(
        store.linked_user(&link("ann")).await.unwrap().as_deref(),
        Some("ann@example.com")
    );
    let refused = Admin::new(store.clone())
        .with_hashing(CHEAP)
        .set_password("ann@example.com", &Secret::new("a password of hers"))
        .await
        .unwrap_err();
    assert!(
        refused.to_string().contains("comes from oidc Corp"),
        "no password for a provider's user: {refused}"
    );
    assert!(
        store.get_user(&bob.username).await.unwrap().is_some(),
        "name taken: kept"
    );
    assert_eq!(
        store.linked_user(&link("bob")).await.unwrap().as_deref(),
        Some(bob.username.as_str())
    );
}
