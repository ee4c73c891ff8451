//! Injected randomness: the protocol core never reads the OS RNG itself (nor the clock: that is
//! `pforte_clock`, injected the same way).

/// A source of cryptographically secure random bytes.
pub(crate) trait Entropy: Send + Sync + 'static {
    fn fill(&self, buf: &mut [u8]);
}

/// The thread-local CSPRNG of `rand` (ChaCha, seeded and reseeded from the OS).
#[derive(Debug, Default, Clone, Copy)]
pub(crate) struct OsEntropy;

impl Entropy for OsEntropy {
    fn fill(&self, buf: &mut [u8]) {
        use rand::RngCore;
        rand::rng().fill_bytes(buf);
    }
}
