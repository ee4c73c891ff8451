//! The certificates the TLS listener serves, as one rustls `ResolvesServerCert` of the
//! gateway's own: one slot per source (each `[tls]` PEM pair by path, then the ACME
//! certificate), swapped whole when a reload or a renewal brings a new pair, so a new handshake
//! sees the new certificate and open connections keep theirs. SNI picks the first slot whose
//! certificate covers the name; a client without SNI, or with a name no slot covers, gets the
//! first filled slot. A client offering ALPN `acme-tls/1` gets the tls-alpn-01 challenge
//! certificate of its name, or no certificate at all.

use std::{
    collections::HashMap,
    sync::{Arc, Mutex, RwLock},
};

use arc_swap::ArcSwap;
use rustls::{
    server::{ClientHello, ResolvesServerCert},
    sign::CertifiedKey,
};

use super::pair::Pair;
use crate::metrics::TlsMetrics;

/// The ALPN protocol of RFC 8737 (tls-alpn-01).
pub(crate) const ACME_TLS_ALPN: &[u8] = b"acme-tls/1";

/// What slot a source fills, and in which order slots are tried.
pub(crate) type Slot = usize;

#[derive(Debug)]
pub(crate) struct CertStore {
    slots: ArcSwap<Vec<Option<Pair>>>,
    /// Serialises writers (a reload and a renewal at once); readers never take it.
    write: Mutex<()>,
    /// A certificate to hand out before any slot is filled (ACME's first order: a generated
    /// self-signed one, so a browser gets a handshake and then the gateway's 503).
    placeholder: Option<Arc<CertifiedKey>>,
    /// tls-alpn-01 answers by domain, while an order is being validated.
    challenges: RwLock<HashMap<String, Arc<CertifiedKey>>>,
    metrics: TlsMetrics,
}

impl CertStore {
    pub(crate) fn new(
        slots: usize,
        placeholder: Option<Arc<CertifiedKey>>,
        metrics: TlsMetrics,
    ) -> Arc<Self> {
        Arc::new(Self {
            slots: ArcSwap::from_pointee(vec![None; slots]),
            write: Mutex::new(()),
            placeholder,
            challenges: RwLock::new(HashMap::new()),
            metrics,
        })
    }

    /// Serves `pair` from `slot` on for new handshakes.
    pub(crate) fn set(&self, slot: Slot, pair: Pair) {
        let _writer = self.write.lock().unwrap_or_else(|p| p.into_inner());
        self.metrics.not_after(pair.label(), pair.not_after);
        let mut next = Vec::clone(&self.slots.load());
        if let Some(place) = next.get_mut(slot) {
            *place = Some(pair);
        }
        self.slots.store(Arc::new(next));
    }
    /// The pair `slot` serves now.
    pub(crate) fn get(&self, slot: Slot) -> Option<Pair> {
        self.slots.load().get(slot).cloned().flatten()
    }

    /// Whether a real certificate is served (not only the placeholder).
    pub(crate) fn has_certificate(&self) -> bool {
        self.slots.load().iter().any(Option::is_some)
    }

    pub(crate) fn metrics(&self) -> &TlsMetrics {
        &self.metrics
    }
    /// Answers tls-alpn-01 for `domain` with `key` until [`Self::clear_challenge`].
    pub(crate) fn set_challenge(&self, domain: &str, key: Arc<CertifiedKey>) {
        let mut map = self.challenges.write().unwrap_or_else(|p| p.into_inner());
        map.insert(domain.to_ascii_lowercase(), key);
    }
    pub(crate) fn clear_challenge(&self, domain: &str) {
        let mut map = self.challenges.write().unwrap_or_else(|p| p.into_inner());
        map.remove(&domain.to_ascii_lowercase());
    }

    /// The certificate for a handshake naming `sni` (none: no SNI).
    pub(crate) fn pick(&self, sni: Option<&str>) -> Option<Arc<CertifiedKey>> {
        let slots = self.slots.load();
        let mut filled = slots.iter().flatten();
        if let Some(name) = sni
            && let Some(pair) = filled.clone().find(|p| p.covers(name))
        {
            return Some(pair.key.clone());
        }
        filled
            .next()
            .map(|p| p.key.clone())
            .or_else(|| self.placeholder.clone())
    }

    fn challenge(&self, sni: Option<&str>) -> Option<Arc<CertifiedKey>> {
        let name = sni?.to_ascii_lowercase();
        let map = self.challenges.read().unwrap_or_else(|p| p.into_inner());
        map.get(&name).cloned()
    }
}

impl ResolvesServerCert for CertStore {
    fn resolve(&self, hello: ClientHello<'_>) -> Option<Arc<CertifiedKey>> {
        let acme = hello
            .alpn()
            .is_some_and(|mut protocols| protocols.any(|p| p == ACME_TLS_ALPN));
        if acme {
            return self.challenge(hello.server_name());
        }
        self.pick(hello.server_name())
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    fn pair(names: &[&str]) -> Pair {
        let names: Vec<String> = names.iter().map(|s| (*s).to_owned()).collect();
        let c = rcgen::generate_simple_self_signed(names).unwrap();
        Pair::from_pem(
            c.cert.pem().as_bytes(),
            c.signing_key.serialize_pem().as_bytes(),
        )
        .unwrap()
    }

    #[test]
    fn sni_picks_the_slot_that_covers_the_name_and_the_first_is_the_default() {
        let store = CertStore::new(3, None, TlsMetrics::default());
        assert!(store.pick(Some("a.example")).is_none());
        assert!(!store.has_certificate());
        let a = pair(&["a.example"]);
        let b = pair(&["*.b.example"]);
        store.set(0, a.clone());
        store.set(2, b.clone());
        assert!(store.has_certificate());
        let same = |x: Option<Arc<CertifiedKey>>, p: &Pair| Arc::ptr_eq(&x.unwrap(), &p.key);
        assert!(same(store.pick(Some("a.example")), &a));
        assert!(same(store.pick(Some("x.b.example")), &b));
        assert!(same(store.pick(Some("X.B.example")), &b));
        assert!(same(store.pick(Some("other.example")), &a));
        assert!(same(store.pick(None), &a));
        // A reload replaces one slot; the others stay.
        let a2 = pair(&["a.example"]);
        store.set(0, a2.clone());
        assert!(same(store.pick(Some("a.example")), &a2));
        assert!(same(store.pick(Some("x.b.example")), &b));
        assert_eq!(store.get(1).map(|p| p.not_after), None);
    }

    #[test]
    fn the_placeholder_serves_until_a_certificate_exists() {
        let placeholder = pair(&["wait.example"]);
        let store = CertStore::new(1, Some(placeholder.key.clone()), TlsMetrics::default());
        assert!(Arc::ptr_eq(
            &store.pick(Some("x")).unwrap(),
            &placeholder.key
        ));
        assert!(!store.has_certificate());
        store.set_challenge("Wait.example", placeholder.key.clone());
        assert!(store.challenge(Some("wait.example")).is_some());
        store.clear_challenge("wait.example");
        assert!(store.challenge(Some("wait.example")).is_none());
    }
}
