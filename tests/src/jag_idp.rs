//! A small enterprise identity provider for the Enterprise-Managed Authorization tests: a real
//! HTTP server on 127.0.0.1 serving its RFC 8414 metadata and its JWKS (one P-256 key), and the
//! ID-JAGs it signs with that key (`jsonwebtoken`). It does not run the RFC 8693 exchange that
//! hands the client an ID-JAG; the tests play the client that already holds one.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use axum::{Json, Router, routing::get};
use base64::Engine;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use jsonwebtoken::{Algorithm, EncodingKey, Header};
use serde_json::{Value, json};

/// The signing key in use and the JWKS served.
struct Keys {
    kid: String,
    pkcs8: Vec<u8>,
    jwks: Value,
}

/// A fresh P-256 key: its id, PKCS#8 DER and public JWK.
fn new_key() -> anyhow::Result<(String, Vec<u8>, Value)> {
    let pair = rcgen::KeyPair::generate()?;
    let raw = pair.public_key_raw();
    anyhow::ensure!(
        raw.len() == 65 && raw[0] == 4,
        "an uncompressed P-256 point"
    );
    let kid = format!("test-{}", &URL_SAFE_NO_PAD.encode(&raw[1..7]));
    let jwk = json!({
        "kty": "EC", "crv": "P-256", "use": "sig", "alg": "ES256", "kid": kid,
        "x": URL_SAFE_NO_PAD.encode(&raw[1..33]),
        "y": URL_SAFE_NO_PAD.encode(&raw[33..65]),
    });
    Ok((kid, pair.serialize_der(), jwk))
}

/// A running test identity provider.
pub struct JagIdp {
    /// Its issuer identifier: `http://127.0.0.1:PORT`.
    pub issuer: String,
    keys: Arc<Mutex<Keys>>,
    next_jti: AtomicU64,
    server: tokio::task::JoinHandle<()>,
}

impl Drop for JagIdp {
    fn drop(&mut self) {
        self.server.abort();
    }
}

impl JagIdp {
    /// Generates a key and serves the metadata and JWKS on a free loopback port.
    pub async fn start() -> anyhow::Result<Self> {
        let (kid, pkcs8, jwk) = new_key()?;
        let keys = Arc::new(Mutex::new(Keys {
            kid,
            pkcs8,
            jwks: json!({"keys": [jwk]}),
        }));
        let served = keys.clone();
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
        let addr: SocketAddr = listener.local_addr()?;
        let issuer = format!("http://{addr}");
        let metadata = json!({
            "issuer": issuer,
            "jwks_uri": format!("{issuer}/jwks.json"),
            "token_endpoint": format!("{issuer}/token"),
        });
        let app = Router::new()
            .route(
                "/.well-known/oauth-authorization-server",
                get(move || {
                    let m = metadata.clone();
                    async move { Json(m) }
                }),
            )
            .route(
                "/jwks.json",
                get(move || {
                    let k = served.lock().map(|k| k.jwks.clone()).unwrap_or_default();
                    async move { Json(k) }
                }),
            );
        let server = tokio::spawn(async move {
            let _ = axum::serve(listener, app).await;
        });
        Ok(Self {
            issuer,
            keys,
            next_jti: AtomicU64::new(1),
            server,
        })
    }

    /// The claims of a good ID-JAG for `sub` (with `email`) to `client_id` at the authorization
    /// server `audience`, for `resource`, valid from `now` for 5 minutes, with a fresh `jti`.
    pub fn claims(
        &self,
        audience: &str,
        client_id: &str,
        resource: &str,
        sub: &str,
        email: &str,
        now: u64,
    ) -> Value {
        let jti = self.next_jti.fetch_add(1, Ordering::Relaxed);
        json!({
            "iss": self.issuer, "sub": sub, "aud": audience, "client_id": client_id,
            "jti": format!("jti-{jti}"), "iat": now, "exp": now + 300,
            "resource": resource, "scope": "mcp:read mcp:write", "email": email,
            "email_verified": true,
        })
    }

    /// `claims` signed with the IdP's key under the JOSE `typ` given (an ID-JAG's is
    /// `oauth-id-jag+jwt`).
    pub fn sign(&self, claims: &Value, typ: &str) -> anyhow::Result<String> {
        let (kid, key) = {
            let k = self
                .keys
                .lock()
                .map_err(|_| anyhow::anyhow!("keys poisoned"))?;
            (k.kid.clone(), EncodingKey::from_ec_der(&k.pkcs8))
        };
        let mut header = Header::new(Algorithm::ES256);
        header.typ = Some(typ.to_owned());
        header.kid = Some(kid);
        Ok(jsonwebtoken::encode(&header, claims, &key)?)
    }

    /// Rotates the signing key: a new key signs from now on, and the JWKS serves only it.
    pub fn rotate(&self) -> anyhow::Result<()> {
        let (kid, pkcs8, jwk) = new_key()?;
        let mut k = self
            .keys
            .lock()
            .map_err(|_| anyhow::anyhow!("keys poisoned"))?;
        *k = Keys {
            kid,
            pkcs8,
            jwks: json!({"keys": [jwk]}),
        };
        Ok(())
    }

    /// A signed ID-JAG.
    pub fn id_jag(&self, claims: &Value) -> anyhow::Result<String> {
        self.sign(claims, "oauth-id-jag+jwt")
    }
}
