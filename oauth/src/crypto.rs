//! Hashing, token minting, key derivation, PKCE and password hashing — the only crypto code.

use argon2::password_hash::{PasswordHash, PasswordHasher, PasswordVerifier, SaltString};
use argon2::{Algorithm, Argon2, Params, Version};
use base64::Engine;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use hmac::{Hmac, Mac};
use sha2::{Digest, Sha256};
use std::fmt;
use subtle::ConstantTimeEq;

use crate::config::PasswordHashing;
use crate::entropy::Entropy;

/// Prefix of every access token this server mints.
pub(crate) const ACCESS_PREFIX: &str = "pfat_";
/// Prefix of every refresh token this server mints.
pub(crate) const REFRESH_PREFIX: &str = "pfrt_";
/// Prefix of authorization codes.
pub(crate) const CODE_PREFIX: &str = "pfac_";
/// Prefix of client secrets.
pub(crate) const SECRET_PREFIX: &str = "pfcs_";

/// A secret string (token, code, password, client secret) whose Debug output is redacted.
#[derive(Clone, PartialEq, Eq)]
pub struct Secret(String);

impl Secret {
    pub fn new(s: impl Into<String>) -> Self {
        Self(s.into())
    }
    /// The plaintext; hand it only to the party it belongs to.
    pub fn expose(&self) -> &str {
        &self.0
    }
}

impl fmt::Debug for Secret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("Secret(<redacted>)")
    }
}

/// Hex SHA-256 of a high-entropy secret (token, code, client secret, session id): the only
/// form in which those are stored.
pub(crate) fn hash_secret(secret: &str) -> String {
    hex::encode(Sha256::digest(secret.as_bytes()))
}

/// Constant-time byte comparison.
pub(crate) fn ct_eq(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && bool::from(a.ct_eq(b))
}

/// 32 random bytes (256 bits), base64url, behind `prefix`.
pub(crate) fn random_token(entropy: &dyn Entropy, prefix: &str) -> Secret {
    let mut bytes = [0u8; 32];
    entropy.fill(&mut bytes);
    Secret(format!("{prefix}{}", URL_SAFE_NO_PAD.encode(bytes)))
}

/// A random identifier (128 bits, hex) for families, clients and the like; not a secret.
pub(crate) fn random_id(entropy: &dyn Entropy) -> String {
    let mut bytes = [0u8; 16];
    entropy.fill(&mut bytes);
    hex::encode(bytes)
}

/// The server's keyed derivations (HMAC-SHA256 under the server key held in the store).
#[derive(Clone)]
pub(crate) struct ServerKey([u8; 32]);

impl fmt::Debug for ServerKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("ServerKey(<redacted>)")
    }
}

impl ServerKey {
    pub(crate) fn from_bytes(bytes: [u8; 32]) -> Self {
        Self(bytes)
    }

    fn mac(&self, label: &str, input: &str) -> [u8; 32] {
        // HMAC accepts keys of any length; this cannot fail.
        let mut mac = match <Hmac<Sha256> as Mac>::new_from_slice(&self.0) {
            Ok(m) => m,
            Err(_) => return [0; 32],
        };
        mac.update(label.as_bytes());
        mac.update(&[0]);
        mac.update(input.as_bytes());
        mac.finalize().into_bytes().into()
    }

    /// The successor pair of a refresh token: deterministic, so that a rotated token
    /// presented again within the grace window yields the very same pair without the
    /// plaintext ever being stored (see DESIGN.md).
    pub(crate) fn successor_tokens(&self, refresh_plaintext: &str) -> (Secret, Secret) {
        let a = self.mac("pforte/v1/successor-access", refresh_plaintext);
        let r = self.mac("pforte/v1/successor-refresh", refresh_plaintext);
        (
            Secret(format!("{ACCESS_PREFIX}{}", URL_SAFE_NO_PAD.encode(a))),
            Secret(format!("{REFRESH_PREFIX}{}", URL_SAFE_NO_PAD.encode(r))),
        )
    }

    /// The CSRF token bound to a login session id.
    pub(crate) fn csrf_token(&self, session_id: &str) -> String {
        URL_SAFE_NO_PAD.encode(self.mac("pforte/v1/csrf", session_id))
    }

    /// The `nonce` and PKCE verifier of a sign-in at an OpenID provider, derived from its
    /// `state` so that neither is stored (43 base64url characters each).
    pub(crate) fn oidc_secrets(&self, state: &str) -> (Secret, Secret) {
        let nonce = self.mac("pforte/v1/oidc-nonce", state);
        let verifier = self.mac("pforte/v1/oidc-pkce", state);
        (
            Secret(URL_SAFE_NO_PAD.encode(nonce)),
            Secret(URL_SAFE_NO_PAD.encode(verifier)),
        )
    }

    /// Constant-time check of a presented CSRF token.
    pub(crate) fn check_csrf(&self, session_id: &str, presented: &str) -> bool {
        ct_eq(self.csrf_token(session_id).as_bytes(), presented.as_bytes())
    }
}

/// RFC 7636 S256: `BASE64URL(SHA256(ASCII(code_verifier)))`.
pub(crate) fn pkce_s256(verifier: &str) -> String {
    URL_SAFE_NO_PAD.encode(Sha256::digest(verifier.as_bytes()))
}

/// Errors of password hashing.
#[derive(Debug, thiserror::Error)]
pub enum PasswordError {
    #[error("argon2 parameters rejected: {0}")]
    Params(String),
    #[error("password hashing failed: {0}")]
    Hash(String),
}

/// argon2id PHC string of `password` under a fresh 16-byte salt.
pub(crate) fn hash_password(
    password: &str,
    params: PasswordHashing,
    entropy: &dyn Entropy,
) -> Result<String, PasswordError> {
    let p = Params::new(
        params.memory_kib,
        params.iterations,
        params.parallelism,
        None,
    )
    .map_err(|e| PasswordError::Params(e.to_string()))?;
    let argon = Argon2::new(Algorithm::Argon2id, Version::V0x13, p);
    let mut salt = [0u8; 16];
    entropy.fill(&mut salt);
    let salt = SaltString::encode_b64(&salt).map_err(|e| PasswordError::Hash(e.to_string()))?;
    argon
        .hash_password(password.as_bytes(), &salt)
        .map(|h| h.to_string())
        .map_err(|e| PasswordError::Hash(e.to_string()))
}

/// Verifies `password` against a PHC string (parameters are read from the string).
pub(crate) fn verify_password(password: &str, phc: &str) -> bool {
    match PasswordHash::new(phc) {
        Ok(parsed) => Argon2::default()
            .verify_password(password.as_bytes(), &parsed)
            .is_ok(),
        Err(_) => false,
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use super::*;
    use crate::entropy::OsEntropy;

    #[test]
    fn rfc7636_appendix_b_vector() {
        assert_eq!(
            pkce_s256("dBjftJeZ4CVP-mB92K27uhbUJU1p1r_wW1gFWFOEjXk"),
            "E9Melhoa2OwvFrEMTJguCHaoeK1t8URWbuGJSstw-cM"
        );
    }

    #[test]
    fn tokens_have_256_bits_and_differ() {
        let a = random_token(&OsEntropy, ACCESS_PREFIX);
        let b = random_token(&OsEntropy, ACCESS_PREFIX);
        assert_ne!(a, b);
        assert_eq!(a.expose().len(), ACCESS_PREFIX.len() + 43);
        assert_eq!(format!("{a:?}"), "Secret(<redacted>)");
    }

    #[test]
    fn successors_are_deterministic_and_keyed() {
        let k1 = ServerKey::from_bytes([1; 32]);
        let k2 = ServerKey::from_bytes([2; 32]);
        assert_eq!(k1.successor_tokens("r"), k1.successor_tokens("r"));
        assert_ne!(k1.successor_tokens("r"), k2.successor_tokens("r"));
        assert_ne!(k1.successor_tokens("r").0, k1.successor_tokens("r").1);
        assert!(k1.check_csrf("s", &k1.csrf_token("s")));
        assert!(!k1.check_csrf("s", &k1.csrf_token("t")));
    }

    #[test]
    fn password_round_trip_is_argon2id() {
        let cheap = PasswordHashing {
            memory_kib: 64,
            iterations: 1,
            parallelism: 1,
        };
        let h = hash_password("hunter2", cheap, &OsEntropy).unwrap();
        assert!(h.starts_with("$argon2id$"));
        assert!(verify_password("hunter2", &h));
        assert!(!verify_password("hunter3", &h));
        assert!(!verify_password("hunter2", "garbage"));
    }
}
