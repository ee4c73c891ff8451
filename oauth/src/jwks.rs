//! The signing keys of the trusted enterprise identity providers (I/O part): their JWKS,
//! found through the issuer's metadata when `jwks_uri` is not configured, cached in process
//! and fetched again when an ID-JAG names a key id the cache does not know (key rotation) —
//! at most once per [`REFETCH_MIN_MS`] (2 s) per issuer, so unknown key ids cannot make us hammer
//! the IdP. Signatures are verified by `jsonwebtoken`, never here.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::Duration;

use jsonwebtoken::jwk::{Jwk, JwkSet};
use jsonwebtoken::{Algorithm, DecodingKey, Header, Validation};

use crate::config::{EnterpriseIdp, secure_or_loopback};

/// Fetching a JWKS again for an unknown key id waits at least this long after the last fetch
/// (a rotated key is usable this long after the IdP starts signing with it, at the latest).
pub(crate) const REFETCH_MIN_MS: u64 = 2_000;
/// A cached JWKS is used for at most this long, then fetched again.
pub(crate) const MAX_AGE_MS: u64 = 3_600_000;
const FETCH_TIMEOUT: Duration = Duration::from_secs(5);
const MAX_BYTES: usize = 256 * 1024;

/// The asymmetric algorithms an ID-JAG may be signed with (no `none`, no shared secrets).
const ALGORITHMS: [Algorithm; 9] = [
    Algorithm::RS256,
    Algorithm::RS384,
    Algorithm::RS512,
    Algorithm::PS256,
    Algorithm::PS384,
    Algorithm::PS512,
    Algorithm::ES256,
    Algorithm::ES384,
    Algorithm::EdDSA,
];

/// Why an assertion's signature could not be verified.
#[derive(Debug, thiserror::Error)]
pub(crate) enum KeyError {
    /// The IdP's keys could not be fetched (its fault or the network's, not the client's).
    #[error("the identity provider's keys could not be fetched: {0}")]
    Fetch(String),
    #[error("{0}")]
    Refused(String),
}

struct Cached {
    keys: JwkSet,
    fetched_ms: u64,
}

/// The JWKS cache of every configured IdP.
#[derive(Default)]
pub(crate) struct IdpKeys {
    cache: Mutex<HashMap<String, Cached>>,
    /// When the last fetch per issuer started (also failed ones), and why it failed.
    attempts: Mutex<HashMap<String, (u64, Option<String>)>>,
}

/// The address policy of an IdP's fetches: public addresses over https, and the hosts the
/// operator named (the issuer's, a configured `jwks_uri`'s) over http or at any address.
fn idp_policy(idp: &EnterpriseIdp) -> pforte_outbound::AddressPolicy {
    let hosts = std::iter::once(idp.issuer.as_str())
        .chain(idp.jwks_uri.as_deref())
        .filter_map(|u| url::Url::parse(u).ok()?.host_str().map(str::to_owned));
    pforte_outbound::AddressPolicy::allowing(hosts)
}

async fn get_json(idp: &EnterpriseIdp, url: &str) -> Result<serde_json::Value, KeyError> {
    if !secure_or_loopback(url) {
        return Err(KeyError::Fetch(format!(
            "{url} is not https (http only on loopback)"
        )));
    }
    let fail = |e: pforte_outbound::OutboundError| KeyError::Fetch(format!("{url}: {e}"));
    let parsed = url::Url::parse(url).map_err(|e| KeyError::Fetch(format!("{url}: {e}")))?;
    let client = pforte_outbound::Client::new(pforte_outbound::Options {
        policy: idp_policy(idp),
        connect_timeout: FETCH_TIMEOUT,
        timeout: Some(FETCH_TIMEOUT),
        ..pforte_outbound::Options::default()
    })
    .map_err(fail)?;
    let mut resp = client
        .request(http::Method::GET, &parsed)
        .map_err(fail)?
        .header(http::header::ACCEPT, "application/json")
        .send()
        .await
        .map_err(|e| fail(e.into()))?;
    if resp.status() != reqwest::StatusCode::OK {
        return Err(KeyError::Fetch(format!(
            "{url}: HTTP status {}",
            resp.status()
        )));
    }
    let body = pforte_outbound::read_capped(&mut resp, MAX_BYTES)
        .await
        .map_err(fail)?;
    serde_json::from_slice(&body).map_err(|e| KeyError::Fetch(format!("{url}: not JSON ({e})")))
}

/// The IdP's `jwks_uri`: configured, or from its metadata (RFC 8414, then OpenID discovery),
/// whose `issuer` must be the configured one.
async fn jwks_uri(idp: &EnterpriseIdp) -> Result<String, KeyError> {
    if let Some(uri) = &idp.jwks_uri {
        return Ok(uri.clone());
    }
    let issuer = idp.issuer.trim_end_matches('/');
    let (origin, path) = match url::Url::parse(issuer) {
        Ok(u) => (
            u.origin().ascii_serialization(),
            u.path().trim_end_matches('/').to_owned(),
        ),
        Err(_) => return Err(KeyError::Fetch(format!("{issuer} is not a URL"))),
    };
    let candidates = [
        format!("{origin}/.well-known/oauth-authorization-server{path}"),
        format!("{issuer}/.well-known/openid-configuration"),
    ];
    let mut last = String::new();
    for url in candidates {
        match get_json(idp, &url).await {
            Ok(doc) => {
                if doc.get("issuer").and_then(|v| v.as_str()) != Some(idp.issuer.as_str()) {
                    last = format!("{url} names another issuer");
                    continue;
                }
                return match doc.get("jwks_uri").and_then(|v| v.as_str()) {
                    Some(uri) if secure_or_loopback(uri) => Ok(uri.to_owned()),
                    Some(uri) => Err(KeyError::Fetch(format!(
                        "jwks_uri {uri} is not https (http only on loopback)"
                    ))),
                    None => Err(KeyError::Fetch(format!("{url} has no jwks_uri"))),
                };
            }
            Err(e) => last = e.to_string(),
        }
    }
    Err(KeyError::Fetch(last))
}

/// The key `header` names in `keys`: by `kid`, or the only key when the header has none.
fn pick<'a>(keys: &'a JwkSet, header: &Header) -> Option<&'a Jwk> {
    match &header.kid {
        Some(kid) => keys.find(kid),
        None if keys.keys.len() == 1 => keys.keys.first(),
        None => None,
    }
}

impl IdpKeys {
    async fn fetch(&self, idp: &EnterpriseIdp, now_ms: u64) -> Result<(), KeyError> {
        let outcome = self.fetch_keys(idp, now_ms).await;
        if let Ok(mut a) = self.attempts.lock() {
            let failure = outcome.as_ref().err().map(|e| match e {
                KeyError::Fetch(why) | KeyError::Refused(why) => why.clone(),
            });
            a.insert(idp.issuer.clone(), (now_ms, failure));
        }
        outcome
    }

    async fn fetch_keys(&self, idp: &EnterpriseIdp, now_ms: u64) -> Result<(), KeyError> {
        let uri = jwks_uri(idp).await?;
        let doc = get_json(idp, &uri).await?;
        let keys: JwkSet = serde_json::from_value(doc)
            .map_err(|e| KeyError::Fetch(format!("{uri}: not a JWK set ({e})")))?;
        tracing::info!(issuer = %idp.issuer, keys = keys.keys.len(), "enterprise identity provider keys fetched");
        if let Ok(mut c) = self.cache.lock() {
            c.insert(
                idp.issuer.clone(),
                Cached {
                    keys,
                    fetched_ms: now_ms,
                },
            );
        }
        Ok(())
    }

    /// Why the last fetch of `idp`'s keys failed, when it did.
    fn last_failure(&self, idp: &EnterpriseIdp) -> Option<String> {
        self.attempts
            .lock()
            .ok()
            .and_then(|a| a.get(&idp.issuer).and_then(|(_, why)| why.clone()))
    }

    /// The cached key for `header`; `Err(fetch_allowed)` when there is none.
    fn cached(&self, idp: &EnterpriseIdp, header: &Header, now_ms: u64) -> Result<Jwk, bool> {
        let last_attempt = self
            .attempts
            .lock()
            .ok()
            .and_then(|a| a.get(&idp.issuer).map(|(t, _)| *t));
        let may_fetch = last_attempt.is_none_or(|t| now_ms.saturating_sub(t) >= REFETCH_MIN_MS);
        let Ok(cache) = self.cache.lock() else {
            return Err(may_fetch);
        };
        match cache.get(&idp.issuer) {
            Some(c) if now_ms.saturating_sub(c.fetched_ms) < MAX_AGE_MS => {
                pick(&c.keys, header).cloned().ok_or(may_fetch)
            }
            _ => Err(may_fetch),
        }
    }

    /// Verifies `assertion`'s signature with `idp`'s key and returns its claims (unchecked:
    /// `protocol::id_jag::check` does that, at the injected clock's time).
    pub(crate) async fn verify(
        &self,
        idp: &EnterpriseIdp,
        assertion: &str,
        header: &Header,
        now_ms: u64,
    ) -> Result<serde_json::Value, KeyError> {
        if !ALGORITHMS.contains(&header.alg) {
            return Err(KeyError::Refused(format!(
                "the ID-JAG's alg {:?} is not accepted (asymmetric signatures only)",
                header.alg
            )));
        }
        let jwk = match self.cached(idp, header, now_ms) {
            Ok(k) => k,
            Err(true) => {
                self.fetch(idp, now_ms).await?;
                self.cached(idp, header, now_ms)
                    .map_err(|_| unknown_key(header))?
            }
            // Not fetched again so soon: an IdP that was down is reported as such.
            Err(false) => {
                return Err(match self.last_failure(idp) {
                    Some(why) => KeyError::Fetch(why),
                    None => unknown_key(header),
                });
            }
        };
        if let Some(alg) = jwk.common.key_algorithm
            && alg.to_string() != format!("{:?}", header.alg)
        {
            return Err(KeyError::Refused(
                "the ID-JAG's alg differs from its key's".into(),
            ));
        }
        let key = DecodingKey::from_jwk(&jwk).map_err(|e| {
            KeyError::Refused(format!("the identity provider's key is unusable ({e})"))
        })?;
        let mut validation = Validation::new(header.alg);
        // Time, issuer and audience are checked by `protocol::id_jag::check` with the
        // injected clock; jsonwebtoken checks the signature only.
        validation.validate_exp = false;
        validation.validate_nbf = false;
        validation.validate_aud = false;
        validation.required_spec_claims.clear();
        jsonwebtoken::decode::<serde_json::Value>(assertion, &key, &validation)
            .map(|t| t.claims)
            .map_err(|e| KeyError::Refused(format!("the ID-JAG's signature is not valid ({e})")))
    }
}

fn unknown_key(header: &Header) -> KeyError {
    KeyError::Refused(match &header.kid {
        Some(kid) => format!("the identity provider has no key {kid}"),
        None => "the ID-JAG names no key id and the identity provider has several keys".into(),
    })
}
