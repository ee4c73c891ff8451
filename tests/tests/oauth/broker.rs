//! End to end, the upstream OAuth broker (`kind = "oauth"`): a real Pforte with OAuth in front
//! of mcp-service plays the third-party MCP server, and the broker — Pforte as an OAuth
//! client — runs against it: discovery from its 401, registration (dynamic, and by a client ID
//! metadata document served over https on 127.0.0.1), the authorization URL opened by a
//! browser that signs in and consents, the code exchange, a call upstream with the access
//! token, a refresh once the token is stale (rotation), and `Revoked` after the grant is
//! revoked upstream.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::sync::Arc;
use std::time::Duration;

use pforte::for_tests::{
    Broker, CallbackError, RefreshError, Registration, TokenAuth, UpstreamServer, choose,
    cimd_document, read_callback,
};
use pforte_clock::ManualClock;
use pforte_tests::{
    OAuth, Stack, TestCert, TlsFront,
    connect::cimd_wrapper,
    oauth::{Browser, browser_step, mcp_status},
};
use url::Url;

const USER: &str = "carol";
const PASSWORD: &str = "upstream horse battery staple";
/// Where the upstream sends the browser back: Pforte's callback (never followed here).
const CALLBACK: &str = "https://pforte.example/connect/notes/callback";
const ROUTE: &str = "notes";

/// The upstream (a Pforte with OAuth) with one user, the broker on a manual clock, and what it
/// discovered.
struct Upstream {
    gw: Stack,
    clock: ManualClock,
    broker: Broker,
    server: Arc<UpstreamServer>,
}

impl Upstream {
    async fn start(stack: Stack) -> Self {
        stack.add_user(USER, PASSWORD).unwrap();
        let clock = ManualClock::at(Duration::from_secs(1_800_000_000));
        let broker = Broker::new(Arc::new(clock.clone()));
        let server = broker
            .discover(
                ROUTE,
                &Url::parse(&stack.mcp_url()).unwrap(),
                Some(&ca_file(&stack)),
                &[],
            )
            .await
            .unwrap();
        Self {
            gw: stack,
            clock,
            broker,
            server,
        }
    }

    /// The browser's part: open `url`, sign in as the user, approve; the callback's `code`
    /// after checking its `state` and its issuer (RFC 9207).
    async fn consent(&self, url: &Url, state: &str) -> String {
        let browser = Browser::for_gateway(&self.gw);
        let (cb, _) = browser_step(&browser, url, USER, PASSWORD, "approve")
            .await
            .unwrap();
        assert!(cb.as_str().starts_with(CALLBACK), "{cb}");
        let callback = read_callback(cb.query().unwrap()).expect("a state");
        assert_eq!(callback.state, state);
        assert!(self.server.iss_parameter_supported);
        let mut elsewhere = (*self.server).clone();
        elsewhere.issuer = "https://as.example".into();
        assert!(matches!(
            callback.code_for(&elsewhere),
            Err(CallbackError::WrongIssuer { .. })
        ));
        callback.code_for(&self.server).unwrap().to_owned()
    }

    /// `whoami` upstream with `token`.
    async fn whoami(&self, token: &str) -> serde_json::Value {
        let client = self.gw.rmcp_client(token, &[]).await.unwrap();
        let me = pforte_tests::whoami(&client).await;
        client.cancel().await.unwrap();
        me
    }
}

fn ca_file(gw: &Stack) -> std::path::PathBuf {
    gw.cert.as_ref().expect("a TLS upstream").cert.clone()
}

/// Discovery, DCR, the code flow, a call upstream, refresh with rotation, `Revoked` after
/// `pforte grant revoke` upstream.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dcr_code_flow_refresh_and_revocation_against_a_real_upstream() {
    let gw = Stack::builder().oauth(OAuth::default()).start().await;
    let up = Upstream::start(gw).await;
    let s = &up.server;

    // Discovery: from the 401's resource_metadata to the authorization server's metadata.
    assert_eq!(s.resource, up.gw.mcp_url());
    assert_eq!(s.issuer, up.gw.base);
    assert_eq!(
        s.authorization_endpoint.as_str(),
        format!("{}/authorize", up.gw.base)
    );
    assert_eq!(s.token_endpoint.as_str(), format!("{}/token", up.gw.base));
    assert!(s.registration_endpoint.is_some());
    assert!(s.cimd_supported);
    assert!(!s.scopes_supported.is_empty());
    // Cached: the same result without asking again.
    let again = up
        .broker
        .discover(
            ROUTE,
            &Url::parse(&up.gw.mcp_url()).unwrap(),
            Some(&ca_file(&up.gw)),
            &[],
        )
        .await
        .unwrap();
    assert!(Arc::ptr_eq(&again, s));

    // A plain-http Pforte cannot serve a metadata document the upstream would fetch: DCR.
    let plain = Url::parse("http://127.0.0.1:9/connect/notes/client.json").unwrap();
    assert_eq!(choose(None, s, &plain).unwrap(), Registration::Dcr);
    let (client, fresh) = up
        .broker
        .client(ROUTE, s, &Registration::Dcr, CALLBACK, "Pforte")
        .await
        .unwrap();
    assert!(fresh);
    assert_eq!(client.auth, TokenAuth::None, "a public client");
    assert!(client.client_secret.is_none());
    let (same, fresh) = up
        .broker
        .client(ROUTE, s, &Registration::Dcr, CALLBACK, "Pforte")
        .await
        .unwrap();
    assert!(!fresh, "registered once per route and issuer");
    assert_eq!(same.client_id, client.client_id);
    assert_eq!(
        up.broker.registered(ROUTE, &s.issuer).unwrap().client_id,
        client.client_id
    );

    // The code flow.
    let begun = up
        .broker
        .begin(s, &client, CALLBACK, &s.scopes_supported, &s.resource)
        .unwrap();
    let code = up.consent(&begun.url, &begun.state).await;
    let tokens = up
        .broker
        .finish(
            s,
            &client,
            &code,
            &begun.pkce_verifier,
            CALLBACK,
            &s.resource,
        )
        .await
        .unwrap();
    let refresh1 = tokens.refresh_token.clone().expect("a refresh token");
    assert_eq!(
        tokens.expires_at_ms,
        Some(1_800_000_000_000 + 3_600_000),
        "expires_in at the broker's clock"
    );
    // The upstream takes the access token and knows the user.
    let access1 = tokens.access_token.expose().to_owned();
    assert_eq!(
        mcp_status(&up.gw.http(), &up.gw.mcp_url(), &access1).await,
        200
    );
    let me = up.whoami(&access1).await;
    assert_eq!(me["subject"], USER);
    assert_eq!(me["client"], client.client_id.as_str());

    // Stale a minute before expiry: refresh, with rotation.
    assert!(!up.broker.is_stale(&tokens));
    up.clock.advance(Duration::from_secs(3_600 - 60));
    assert!(up.broker.is_stale(&tokens));
    let renewed = up
        .broker
        .refresh(s, &client, &refresh1, &s.resource)
        .await
        .unwrap();
    let access2 = renewed.access_token.expose().to_owned();
    let refresh2 = renewed.refresh_token.clone().expect("a refresh token");
    assert_ne!(access2, access1);
    assert_ne!(refresh2, refresh1, "the upstream rotates refresh tokens");
    assert!(!up.broker.is_stale(&renewed));
    assert_eq!(up.whoami(&access2).await["subject"], USER);

    // The grant revoked upstream: the refresh says Revoked (the user must connect again).
    up.gw
        .admin_cmd(&["grant", "revoke", "--user", USER], "")
        .unwrap();
    let gone = up.broker.refresh(s, &client, &refresh2, &s.resource).await;
    assert!(
        matches!(&gone, Err(RefreshError::Revoked(r)) if r.contains("invalid_grant")),
        "{gone:?}"
    );
}

/// CIMD: the client id is the URL of a document Pforte serves over https; the upstream fetches
/// it during the authorization request, and the flow runs as a public client without any
/// registration.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cimd_client_runs_the_code_flow_without_registration() {
    // The document's https server on 127.0.0.1 (a TLS front for a plain axum server).
    let dir = tempfile::tempdir().unwrap();
    let cert = TestCert::create(dir.path()).unwrap();
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let backend = listener.local_addr().unwrap();
    let front = TlsFront::start(&cert, backend).await.unwrap();
    let client_id_url = format!(
        "https://127.0.0.1:{}/connect/{ROUTE}/client.json",
        front.addr.port()
    );
    let doc = cimd_document(&client_id_url, CALLBACK, "Pforte (test)");
    let fetched = Arc::new(std::sync::atomic::AtomicU32::new(0));
    let counter = Arc::clone(&fetched);
    let app = axum::Router::new().route(
        &format!("/connect/{ROUTE}/client.json"),
        axum::routing::get(move || {
            counter.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
            let doc = doc.clone();
            async move { axum::Json(doc) }
        }),
    );
    let server = tokio::spawn(async move {
        let _ = axum::serve(listener, app).await;
    });

    let wrapper = cimd_wrapper(&cert.cert);
    let wrapper: Vec<&str> = wrapper.iter().map(String::as_str).collect();
    let gw = Stack::builder()
        .oauth(OAuth::default())
        .wrapper(&wrapper)
        .start()
        .await;
    let up = Upstream::start(gw).await;
    let s = &up.server;

    let registration = choose(None, s, &Url::parse(&client_id_url).unwrap()).unwrap();
    assert_eq!(
        registration,
        Registration::Cimd {
            client_id_url: client_id_url.clone()
        }
    );
    let (client, fresh) = up
        .broker
        .client(ROUTE, s, &registration, CALLBACK, "Pforte (test)")
        .await
        .unwrap();
    assert!(!fresh, "nothing registered");
    assert_eq!(client.client_id, client_id_url);
    assert_eq!(client.auth, TokenAuth::None);

    let begun = up
        .broker
        .begin(s, &client, CALLBACK, &s.scopes_supported, &s.resource)
        .unwrap();
    let code = up.consent(&begun.url, &begun.state).await;
    assert!(
        fetched.load(std::sync::atomic::Ordering::SeqCst) >= 1,
        "the upstream fetched the document"
    );
    let tokens = up
        .broker
        .finish(
            s,
            &client,
            &code,
            &begun.pkce_verifier,
            CALLBACK,
            &s.resource,
        )
        .await
        .unwrap();
    let me = up.whoami(tokens.access_token.expose()).await;
    assert_eq!(me["subject"], USER);
    assert_eq!(me["client"], client_id_url.as_str());

    let renewed = up
        .broker
        .refresh(
            s,
            &client,
            tokens.refresh_token.as_ref().unwrap(),
            &s.resource,
        )
        .await
        .unwrap();
    assert_eq!(
        up.whoami(renewed.access_token.expose()).await["subject"],
        USER
    );

    // Disconnecting revokes upstream (RFC 7009): the grant is gone there too.
    assert_eq!(up.broker.revoke(s, &client, &renewed).await, Ok(true));
    let gone = up
        .broker
        .refresh(
            s,
            &client,
            renewed.refresh_token.as_ref().unwrap(),
            &s.resource,
        )
        .await;
    assert!(matches!(gone, Err(RefreshError::Revoked(_))), "{gone:?}");
    server.abort();
}

/// A stand-in upstream on plain http (loopback) whose 401 names no `resource_metadata`: its
/// protected-resource metadata only at the root well-known URL, its authorization server
/// (issuer with a path) only at the OpenID configuration URL; `as_meta` is merged into that
/// server's metadata. Its token endpoint is always unavailable (503), its `/as/gone` endpoint
/// says `invalid_grant`, and `/moved` redirects.
async fn fake_upstream(as_meta: serde_json::Value) -> (String, tokio::task::JoinHandle<()>) {
    use axum::{
        Json, Router,
        http::{StatusCode, header},
        response::IntoResponse,
        routing::{get, post},
    };
    use serde_json::json;
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let base = format!("http://{}", listener.local_addr().unwrap());
    let issuer = format!("{base}/as");
    let prm = json!({
        "resource": format!("{base}/t/mcp"),
        "authorization_servers": [issuer],
        "scopes_supported": ["notes:read"],
    });
    let mut meta = json!({
        "issuer": issuer,
        "authorization_endpoint": format!("{issuer}/authorize"),
        "token_endpoint": format!("{issuer}/token"),
        "response_types_supported": ["code"],
        "code_challenge_methods_supported": ["S256"],
    });
    for (k, v) in as_meta.as_object().unwrap() {
        meta[k] = v.clone();
    }
    let app = Router::new()
        .route(
            "/t/mcp",
            post(|| async {
                (
                    StatusCode::UNAUTHORIZED,
                    [(header::WWW_AUTHENTICATE, "Bearer realm=\"t\"")],
                )
            }),
        )
        .route(
            "/.well-known/oauth-protected-resource",
            get(move || {
                let prm = prm.clone();
                async move { Json(prm) }
            }),
        )
        .route(
            "/as/.well-known/openid-configuration",
            get(move || {
                let meta = meta.clone();
                async move { Json(meta) }
            }),
        )
        .route(
            "/as/token",
            post(|| async {
                (
                    StatusCode::SERVICE_UNAVAILABLE,
                    Json(json!({"error": "temporarily_unavailable"})),
                )
            }),
        )
        .route(
            "/as/gone",
            post(|| async {
                (
                    StatusCode::BAD_REQUEST,
                    Json(json!({"error": "invalid_grant", "error_description": "revoked"})),
                )
            }),
        )
        .route(
            "/moved",
            post(|| async { axum::response::Redirect::temporary("/as/token").into_response() }),
        );
    let server = tokio::spawn(async move {
        let _ = axum::serve(listener, app).await;
    });
    (base, server)
}

/// Discovery's fallbacks (root protected-resource metadata, the OpenID configuration of an
/// issuer with a path), a server without PKCE S256 refused by name, and how refresh failures
/// are told apart: unavailable or redirected is `Transient`, `invalid_grant` is `Revoked`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn discovery_falls_back_and_refresh_failures_are_classified() {
    use pforte::for_tests::{DiscoveryError, UpstreamClient};

    let clock = ManualClock::at(Duration::from_secs(1_800_000_000));
    let broker = Broker::new(Arc::new(clock.clone()));
    let (base, server) = fake_upstream(serde_json::json!({})).await;
    let mcp = Url::parse(&format!("{base}/t/mcp")).unwrap();
    let s = broker.discover("t", &mcp, None, &[]).await.unwrap();
    assert_eq!(s.resource, mcp.as_str());
    assert_eq!(s.issuer, format!("{base}/as"));
    assert_eq!(s.token_endpoint.as_str(), format!("{base}/as/token"));
    assert_eq!(s.scopes_supported, ["notes:read"]);
    assert!(!s.cimd_supported);
    assert!(s.registration_endpoint.is_none());
    // Neither CIMD nor DCR: only a configured client will do.
    let https = Url::parse("https://gw.example/connect/t/client.json").unwrap();
    assert!(choose(None, &s, &https).is_err());

    let client = UpstreamClient {
        client_id: "configured".into(),
        client_secret: None,
        auth: TokenAuth::None,
    };
    let rt = pforte::for_tests::Secret::new("rt");
    let unavailable = broker.refresh(&s, &client, &rt, &s.resource).await;
    assert!(
        matches!(&unavailable, Err(RefreshError::Transient(r)) if r.contains("temporarily_unavailable")),
        "{unavailable:?}"
    );
    let mut moved = (*s).clone();
    moved.token_endpoint = Url::parse(&format!("{base}/moved")).unwrap();
    let redirected = broker.refresh(&moved, &client, &rt, &s.resource).await;
    assert!(
        matches!(redirected, Err(RefreshError::Transient(_))),
        "{redirected:?}"
    );
    let mut gone = (*s).clone();
    gone.token_endpoint = Url::parse(&format!("{base}/as/gone")).unwrap();
    let revoked = broker.refresh(&gone, &client, &rt, &s.resource).await;
    assert_eq!(
        revoked,
        Err(RefreshError::Revoked("invalid_grant: revoked".into()))
    );
    server.abort();

    // An authorization server without S256 is refused, by name.
    let (base, server) =
        fake_upstream(serde_json::json!({"code_challenge_methods_supported": ["plain"]})).await;
    let mcp = Url::parse(&format!("{base}/t/mcp")).unwrap();
    let refused = broker.discover("plain", &mcp, None, &[]).await;
    assert!(
        matches!(refused, Err(DiscoveryError::NoPkceS256)),
        "{refused:?}"
    );
    server.abort();

    // Metadata naming a plain-http endpoint off loopback is refused.
    let (base, server) =
        fake_upstream(serde_json::json!({"token_endpoint": "http://as.example/token"})).await;
    let mcp = Url::parse(&format!("{base}/t/mcp")).unwrap();
    let refused = broker.discover("insecure", &mcp, None, &[]).await;
    assert!(
        matches!(refused, Err(DiscoveryError::Insecure(_))),
        "{refused:?}"
    );
    server.abort();
}
