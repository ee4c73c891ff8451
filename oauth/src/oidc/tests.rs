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

/// A provider on 127.0.0.1 whose token endpoint answers with an ID token (ES256, signed here)
/// that carries no email, and whose UserInfo answers `userinfo`; returns the issuer.
async fn serve_provider(userinfo: serde_json::Value) -> String {
    use base64::Engine as _;
    use base64::engine::general_purpose::URL_SAFE_NO_PAD;
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let issuer = format!("http://{}", listener.local_addr().unwrap());
    let pair = rcgen::KeyPair::generate().unwrap();
    let raw = pair.public_key_raw();
    let jwks = serde_json::json!({"keys": [{
        "kty": "EC", "crv": "P-256", "use": "sig", "alg": "ES256", "kid": "k1",
        "x": URL_SAFE_NO_PAD.encode(&raw[1..33]),
        "y": URL_SAFE_NO_PAD.encode(&raw[33..65]),
    }]});
    let mut header = jsonwebtoken::Header::new(jsonwebtoken::Algorithm::ES256);
    header.kid = Some("k1".into());
    let now = 1_800_000_000u64;
    let claims = serde_json::json!({
        "iss": issuer, "aud": "pforte", "sub": "s1", "iat": now, "exp": now + 300,
        "nonce": "the-nonce",
    });
    let key = jsonwebtoken::EncodingKey::from_ec_der(&pair.serialize_der());
    let id_token = jsonwebtoken::encode(&header, &claims, &key).unwrap();
    let doc = serde_json::json!({
        "issuer": issuer,
        "authorization_endpoint": format!("{issuer}/auth"),
        "token_endpoint": format!("{issuer}/token"),
        "userinfo_endpoint": format!("{issuer}/userinfo"),
        "jwks_uri": format!("{issuer}/jwks"),
        "response_types_supported": ["code"],
        "subject_types_supported": ["public"],
        "id_token_signing_alg_values_supported": ["ES256"],
    });
    let json = |v: serde_json::Value| {
        axum::routing::get(move || {
            let v = v.clone();
            async move { axum::Json(v) }
        })
    };
    let token = serde_json::json!({
        "access_token": "at-1", "token_type": "Bearer", "expires_in": 60, "id_token": id_token,
    });
    let app = axum::Router::new()
        .route("/.well-known/openid-configuration", json(doc))
        .route("/jwks", json(jwks))
        .route("/userinfo", json(userinfo))
        .route(
            "/token",
            axum::routing::post(move || {
                let t = token.clone();
                async move { axum::Json(t) }
            }),
        );
    tokio::spawn(async move { axum::serve(listener, app).await });
    issuer
}

#[tokio::test]
async fn claims_missing_from_the_id_token_come_from_userinfo_about_the_same_subject() {
    let issuer = serve_provider(serde_json::json!({
        "sub": "s1", "email": "Ann@Example.com", "email_verified": true, "groups": ["eng"],
    }))
    .await;
    let id = providers(&issuer)
        .finish("Corp", "code-1", &"v".repeat(43), "the-nonce")
        .await
        .unwrap();
    assert_eq!(id.subject, "s1");
    assert_eq!(id.email.as_deref(), Some("ann@example.com"));
    assert_eq!(id.groups, ["eng"]);

    let issuer = serve_provider(serde_json::json!({
        "sub": "someone-else", "email": "eve@example.com", "email_verified": true,
    }))
    .await;
    let e = providers(&issuer)
        .finish("Corp", "code-1", &"v".repeat(43), "the-nonce")
        .await
        .unwrap_err();
    assert!(
        matches!(&e, OidcError::Token(m) if m.contains("another person")),
        "{e:?}"
    );
}
