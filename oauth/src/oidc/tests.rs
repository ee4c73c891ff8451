//! The provider client against a discovery document served on 127.0.0.1 by a tiny axum app:
//! endpoints named in plain http off loopback are refused, and a provider that does not
//! answer is "unreachable" (the end-to-end tests run the real `oidc-provider`).
#![allow(clippy::unwrap_used)]

use std::sync::Arc;

use pforte_clock::ManualClock;

use super::*;

fn provider(issuer: &str) -> OidcProviderConfig {
    OidcProviderConfig {
        name: "Corp".into(),
        issuer: issuer.into(),
        client_id: "pforte".into(),
        client_secret_file: None,
        scopes: vec!["openid".into(), "email".into()],
        allowed_domains: vec!["example.com".into()],
        allowed_emails: vec![],
        allowed_groups: vec![],
        groups_claim: "groups".into(),
        email_claim: "email".into(),
        trust_email: false,
    }
}

/// Serves a discovery document whose token endpoint is `token_endpoint`; returns the issuer.
async fn serve_discovery(token_endpoint: &str) -> String {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let issuer = format!("http://{}", listener.local_addr().unwrap());
    let doc = serde_json::json!({
        "issuer": issuer,
        "authorization_endpoint": format!("{issuer}/auth"),
        "token_endpoint": token_endpoint.replace("ISSUER", &issuer),
        "jwks_uri": format!("{issuer}/jwks"),
        "response_types_supported": ["code"],
        "subject_types_supported": ["public"],
        "id_token_signing_alg_values_supported": ["RS256"],
    });
    let app = axum::Router::new()
        .route(
            "/.well-known/openid-configuration",
            axum::routing::get(move || {
                let doc = doc.clone();
                async move { axum::Json(doc) }
            }),
        )
        .route(
            "/jwks",
            axum::routing::get(|| async { axum::Json(serde_json::json!({ "keys": [] })) }),
        );
    tokio::spawn(async move { axum::serve(listener, app).await });
    issuer
}

fn providers(issuer: &str) -> Providers {
    let clock = Arc::new(ManualClock::at(std::time::Duration::from_secs(
        1_800_000_000,
    )));
    Providers::new(
        vec![(provider(issuer), None)],
        "https://gw.example/oidc/callback",
        clock,
    )
    .unwrap()
}

#[tokio::test]
async fn the_authorization_url_carries_pkce_state_nonce_and_scopes() {
    let issuer = serve_discovery("ISSUER/token").await;
    let url = providers(&issuer)
        .authorize_url("Corp", "pfo_state", "the-nonce", &"v".repeat(43))
        .await
        .unwrap();
    let q: std::collections::HashMap<_, _> = url.query_pairs().into_owned().collect();
    assert_eq!(q["response_type"], "code");
    assert_eq!(q["client_id"], "pforte");
    assert_eq!(q["state"], "pfo_state");
    assert_eq!(q["nonce"], "the-nonce");
    assert_eq!(q["code_challenge_method"], "S256");
    assert_eq!(q["redirect_uri"], "https://gw.example/oidc/callback");
    assert_eq!(q["scope"], "openid email");
}

#[tokio::test]
async fn plain_http_endpoints_off_loopback_are_refused() {
    let issuer = serve_discovery("http://idp.example/token").await;
    let e = providers(&issuer)
        .authorize_url("Corp", "pfo_s", "n", &"v".repeat(43))
        .await
        .unwrap_err();
    assert!(
        matches!(&e, OidcError::Unreachable(m) if m.contains("plain-http endpoint off loopback")),
        "{e:?}"
    );
}

#[tokio::test]
async fn a_provider_that_does_not_answer_is_unreachable() {
    let port = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        l.local_addr().unwrap().port()
    };
    let e = providers(&format!("http://127.0.0.1:{port}"))
        .authorize_url("Corp", "pfo_s", "n", &"v".repeat(43))
        .await
        .unwrap_err();
    assert!(matches!(e, OidcError::Unreachable(_)), "{e:?}");
    assert_eq!(e.code(), "idp_unreachable");
}
