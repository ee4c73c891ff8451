//! The vault's key ring and its AEAD: AES-256-GCM (ring) with a random 96-bit nonce per seal,
//! the record's identity as associated data (a sealed value moved to another user's or route's
//! row does not open), and the sealing key's id in front of every ciphertext, so a ring with
//! several keys opens records of each and seals new ones with the first.
//!
//! Key text, from a file or `PFORTE_VAULT_KEY`: one key per line, `ID:BASE64URL` of 32 random
//! bytes; blank lines and `#` comments are skipped. The first key seals; the rest only open.

use std::{collections::HashMap, fmt, path::Path};

use base64::{Engine as _, engine::general_purpose::URL_SAFE_NO_PAD};
use ring::{
    aead::{AES_256_GCM, Aad, LessSafeKey, NONCE_LEN, Nonce, UnboundKey},
    rand::{SecureRandom, SystemRandom},
};

/// Bytes of one key.
pub(crate) const KEY_LEN: usize = 32;
/// The longest key id.
const MAX_ID_LEN: usize = 32;

/// Why a key ring cannot be read.
#[derive(Debug, thiserror::Error)]
pub(crate) enum KeyError {
    #[error("vault key file {0}: {1}")]
    File(String, std::io::Error),
    #[error("vault key file {0} is readable by group or others (mode {1:o}); `chmod 600` it")]
    Exposed(String, u32),
    #[error("the vault key holds no key (one `ID:BASE64URL` line per key)")]
    Empty,
    #[error("vault key line {line}: {reason}")]
    Line { line: usize, reason: String },
    #[error("vault key id {0:?} appears twice")]
    Duplicate(String),
}

/// Why a sealed value does not open.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub(crate) enum SealError {
    #[error("sealed under key {0:?}, which the key ring does not hold")]
    UnknownKey(String),
    #[error("the sealed value is malformed")]
    Malformed,
    #[error("the sealed value does not open (wrong key, or altered)")]
    Rejected,
    #[error("no randomness for a nonce")]
    Random,
}

/// The keys that seal and open vault records; the first seals.
pub(crate) struct KeyRing {
    keys: Vec<(String, LessSafeKey)>,
    by_id: HashMap<String, usize>,
    random: SystemRandom,
}

impl fmt::Debug for KeyRing {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let ids: Vec<&str> = self.keys.iter().map(|(id, _)| id.as_str()).collect();
        f.debug_struct("KeyRing").field("ids", &ids).finish()
    }
}

impl KeyRing {
    /// The ring in `text` (see the module doc).
    pub(crate) fn parse(text: &str) -> Result<Self, KeyError> {
        let mut keys = Vec::new();
        let mut by_id = HashMap::new();
        for (n, raw) in text.lines().enumerate() {
            let line = raw.trim();
            if line.is_empty() || line.starts_with('#') {
                continue;
            }
            let bad = |reason: &str| KeyError::Line {
                line: n + 1,
                reason: reason.to_owned(),
            };
            let (id, b64) = line
                .split_once(':')
                .ok_or_else(|| bad("expected ID:BASE64URL"))?;
            let id = id.trim();
            if id.is_empty()
                || id.len() > MAX_ID_LEN
                || !id
                    .bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
            {
                return Err(bad("the id is 1 to 32 of A-Z a-z 0-9 - _"));
            }
            let bytes = URL_SAFE_NO_PAD
                .decode(b64.trim().trim_end_matches('='))
                .map_err(|_| bad("the key is not base64url"))?;
            if bytes.len() != KEY_LEN {
                return Err(bad("the key must be 32 bytes"));
            }
            let key = UnboundKey::new(&AES_256_GCM, &bytes).map_err(|_| bad("unusable key"))?;
            if by_id.insert(id.to_owned(), keys.len()).is_some() {
                return Err(KeyError::Duplicate(id.to_owned()));
            }
            keys.push((id.to_owned(), LessSafeKey::new(key)));
        }
        if keys.is_empty() {
            return Err(KeyError::Empty);
        }
        Ok(Self {
            keys,
            by_id,
            random: SystemRandom::new(),
        })
    }

    /// The ring in the file at `path`, which must be readable by its owner only.
    pub(crate) fn read_file(path: &Path) -> Result<Self, KeyError> {
        let shown = path.display().to_string();
        let mode = pforte_oauth::mode_of(path).map_err(|e| KeyError::File(shown.clone(), e))?;
        if mode & 0o077 != 0 {
            return Err(KeyError::Exposed(shown, mode & 0o777));
        }
        let text = std::fs::read_to_string(path).map_err(|e| KeyError::File(shown, e))?;
        Self::parse(&text)
    }

    /// The id of the key that seals.
    pub(crate) fn current(&self) -> &str {
        self.keys.first().map_or("", |(id, _)| id.as_str())
    }

    /// `plain` sealed under the current key, bound to `context`: `ID.BASE64URL(nonce ‖ ct ‖ tag)`.
    pub(crate) fn seal(&self, context: &str, plain: &[u8]) -> Result<String, SealError> {
        let Some((id, key)) = self.keys.first() else {
            return Err(SealError::UnknownKey(String::new()));
        };
        let mut nonce = [0u8; NONCE_LEN];
        self.random
            .fill(&mut nonce)
            .map_err(|_| SealError::Random)?;
        let mut data = plain.to_vec();
        key.seal_in_place_append_tag(
            Nonce::assume_unique_for_key(nonce),
            Aad::from(context.as_bytes()),
            &mut data,
        )
        .map_err(|_| SealError::Random)?;
        let mut out = Vec::with_capacity(NONCE_LEN + data.len());
        out.extend_from_slice(&nonce);
        out.extend_from_slice(&data);
        Ok(format!("{id}.{}", URL_SAFE_NO_PAD.encode(out)))
    }

    /// The plaintext of `sealed`, if it was sealed by a key of the ring for `context`.
    pub(crate) fn open(&self, context: &str, sealed: &str) -> Result<Vec<u8>, SealError> {
        let (id, b64) = sealed.split_once('.').ok_or(SealError::Malformed)?;
        let key = self
            .by_id
            .get(id)
            .and_then(|&i| self.keys.get(i))
            .map(|(_, k)| k)
            .ok_or_else(|| SealError::UnknownKey(id.to_owned()))?;
        let raw = URL_SAFE_NO_PAD
            .decode(b64)
            .map_err(|_| SealError::Malformed)?;
        if raw.len() < NONCE_LEN + AES_256_GCM.tag_len() {
            return Err(SealError::Malformed);
        }
        let (nonce, body) = raw.split_at(NONCE_LEN);
        let nonce = Nonce::try_assume_unique_for_key(nonce).map_err(|_| SealError::Malformed)?;
        let mut body = body.to_vec();
        let plain = key
            .open_in_place(nonce, Aad::from(context.as_bytes()), &mut body)
            .map_err(|_| SealError::Rejected)?;
        Ok(plain.to_vec())
    }

    /// The ids of the ring's keys, the sealing one first.
    pub(crate) fn ids(&self) -> Vec<&str> {
        self.keys.iter().map(|(id, _)| id.as_str()).collect()
    }

    /// Whether `sealed` is under the current key (else `rekey` re-seals it).
    pub(crate) fn is_current(&self, sealed: &str) -> bool {
        sealed
            .split_once('.')
            .is_some_and(|(id, _)| id == self.current())
    }
}

/// A new key line `ID:BASE64URL` with 32 random bytes; `id` as given.
pub(crate) fn generate_line(id: &str) -> Result<String, SealError> {
    let mut key = [0u8; KEY_LEN];
    SystemRandom::new()
        .fill(&mut key)
        .map_err(|_| SealError::Random)?;
    Ok(format!("{id}:{}", URL_SAFE_NO_PAD.encode(key)))
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    fn ring(text: &str) -> KeyRing {
        KeyRing::parse(text).unwrap()
    }

    #[test]
    fn seals_and_opens_bound_to_context() {
        let k = ring(&generate_line("k1").unwrap());
        let s = k.seal("notes\0oauth:ann", b"tok").unwrap();
        assert!(s.starts_with("k1."));
        assert!(!s.contains("tok"));
        assert_eq!(k.open("notes\0oauth:ann", &s).unwrap(), b"tok");
        assert_eq!(k.open("notes\0oauth:bob", &s), Err(SealError::Rejected));
        // Two seals of one value differ (fresh nonce).
        assert_ne!(s, k.seal("notes\0oauth:ann", b"tok").unwrap());
    }

    #[test]
    fn an_altered_value_does_not_open() {
        let k = ring(&generate_line("k1").unwrap());
        let s = k.seal("c", b"secret").unwrap();
        let mut bytes = s.into_bytes();
        let last = bytes.len() - 2;
        bytes[last] = if bytes[last] == b'A' { b'B' } else { b'A' };
        let s = String::from_utf8(bytes).unwrap();
        assert!(matches!(
            k.open("c", &s),
            Err(SealError::Rejected | SealError::Malformed)
        ));
    }

    #[test]
    fn rotation_opens_old_and_seals_new() {
        let old = generate_line("old").unwrap();
        let new = generate_line("new").unwrap();
        let before = ring(&old);
        let sealed = before.seal("c", b"v").unwrap();
        let after = ring(&format!("# rotated\n{new}\n\n{old}\n"));
        assert_eq!(after.current(), "new");
        assert_eq!(after.open("c", &sealed).unwrap(), b"v");
        assert!(!after.is_current(&sealed));
        assert!(after.is_current(&after.seal("c", b"v").unwrap()));
        let only_new = ring(&new);
        assert_eq!(
            only_new.open("c", &sealed),
            Err(SealError::UnknownKey("old".into()))
        );
    }

    #[test]
    fn bad_rings_are_refused_with_the_line() {
        assert!(matches!(KeyRing::parse("\n# none\n"), Err(KeyError::Empty)));
        assert!(matches!(
            KeyRing::parse("k1:c2hvcnQ"),
            Err(KeyError::Line { line: 1, .. })
        ));
        assert!(matches!(
            KeyRing::parse("\nnocolon"),
            Err(KeyError::Line { line: 2, .. })
        ));
        let line = generate_line("k").unwrap();
        assert!(matches!(
            KeyRing::parse(&format!("{line}\n{line}")),
            Err(KeyError::Duplicate(_))
        ));
        let bad_id = line.replacen('k', "k y", 1);
        assert!(matches!(
            KeyRing::parse(&bad_id),
            Err(KeyError::Line { line: 1, .. })
        ));
        // Debug never shows key material.
        let text = format!("{:?}", ring(&line));
        assert_eq!(text, "KeyRing { ids: [\"k\"] }");
    }

    #[test]
    fn a_key_file_others_can_read_is_refused() {
        use std::os::unix::fs::PermissionsExt as _;
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("vault.key");
        std::fs::write(&path, generate_line("k").unwrap()).unwrap();
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o644)).unwrap();
        assert!(matches!(
            KeyRing::read_file(&path),
            Err(KeyError::Exposed(_, 0o644))
        ));
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o600)).unwrap();
        assert_eq!(KeyRing::read_file(&path).unwrap().current(), "k");
    }
}
