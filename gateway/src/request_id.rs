//! Request ids: UUID-shaped (version 4 layout), unique per process by a counter, distinct across
//! processes by a random seed drawn once. No system call and no RNG per request.

use std::sync::atomic::{AtomicU64, Ordering};

/// Hands out request ids.
#[derive(Debug)]
pub(crate) struct RequestIds {
    seed: [u8; 8],
    base: u64,
    next: AtomicU64,
}

impl RequestIds {
    /// Ids from a 128-bit seed (the caller draws it, once).
    pub(crate) fn new(seed: u128) -> Self {
        let bytes = seed.to_be_bytes();
        let mut head = [0u8; 8];
        head.copy_from_slice(&bytes[..8]);
        let mut tail = [0u8; 8];
        tail.copy_from_slice(&bytes[8..]);
        Self {
            seed: head,
            base: u64::from_be_bytes(tail),
            next: AtomicU64::new(0),
        }
    }

    /// Seeded from the OS's randomness.
    pub(crate) fn random() -> Self {
        Self::new(rand::random())
    }

    /// The next id, e.g. `5b0c41d2-9a7e-4f13-8e21-0000000a31c7`-like (hex, lower case).
    pub(crate) fn next_id(&self) -> String {
        let n = self.next.fetch_add(1, Ordering::Relaxed);
        let mut bytes = [0u8; 16];
        bytes[..8].copy_from_slice(&self.seed);
        // The counter lives in the low 62 bits the variant bits leave alone.
        let low = (self.base.wrapping_add(n) & (u64::MAX >> 2)) | (self.base & !(u64::MAX >> 2));
        bytes[8..].copy_from_slice(&low.to_be_bytes());
        let id = uuid::Builder::from_random_bytes(bytes).into_uuid();
        let mut out = String::with_capacity(uuid::fmt::Hyphenated::LENGTH);
        out.push_str(
            id.hyphenated()
                .encode_lower(&mut uuid::Uuid::encode_buffer()),
        );
        out
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn ids_are_distinct_uuids_of_version_4() {
        let ids = RequestIds::new(0x0123_4567_89ab_cdef_fedc_ba98_7654_3210);
        let mut seen = std::collections::HashSet::new();
        for _ in 0..10_000 {
            let id = ids.next_id();
            let parsed = uuid::Uuid::parse_str(&id).unwrap();
            assert_eq!(parsed.get_version_num(), 4);
            assert_eq!(parsed.get_variant(), uuid::Variant::RFC4122);
            assert!(seen.insert(id));
        }
    }

    #[test]
    fn the_seed_separates_processes() {
        let a = RequestIds::new(1 << 80).next_id();
        let b = RequestIds::new(2 << 80).next_id();
        assert_ne!(a, b);
    }

    #[test]
    fn the_counter_wraps_within_its_bits() {
        let ids = RequestIds::new(u128::MAX);
        let first = ids.next_id();
        let second = ids.next_id();
        assert_ne!(first, second);
        assert!(uuid::Uuid::parse_str(&second).is_ok());
    }
}
