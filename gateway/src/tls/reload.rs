//! PEM pairs given by path, reloaded when they change on disk (read every
//! [`POLL`]; compared by content, so a rename-into-place, a symlink swap and an in-place
//! write are all seen) and at once on SIGHUP. A changed pair that does not load (half
//! written, key of another certificate, not PEM) leaves the previous one served and is logged
//! with the reason, once per content; the next good content is taken.

use std::{path::Path, sync::Arc, time::Duration};

use async_trait::async_trait;
use pingora::{server::ShutdownWatch, services::background::BackgroundService};

use super::{
    pair::{Pair, PairError},
    store::{CertStore, Slot},
};
use crate::config::TlsFiles;

/// How often the files are read for changes.
pub(crate) const POLL: Duration = Duration::from_secs(1);

/// Why a pair by path did not load, naming the file.
#[derive(Debug, thiserror::Error)]
pub(crate) enum LoadError {
    #[error("tls.cert {path}: {reason}")]
    Cert { path: String, reason: String },
    #[error("tls.key {path}: {reason}")]
    Key { path: String, reason: String },
    #[error("tls: the key {key} does not belong to the certificate {cert}")]
    Mismatch { cert: String, key: String },
}

/// The bytes of a pair's two files.
type Contents = (Vec<u8>, Vec<u8>);

fn read(files: &TlsFiles) -> Result<Contents, LoadError> {
    let io = |path: &Path, e: std::io::Error, key: bool| {
        let (path, reason) = (path.display().to_string(), e.to_string());
        if key {
            LoadError::Key { path, reason }
        } else {
            LoadError::Cert { path, reason }
        }
    };
    let cert = std::fs::read(&files.cert).map_err(|e| io(&files.cert, e, false))?;
    let key = std::fs::read(&files.key).map_err(|e| io(&files.key, e, true))?;
    Ok((cert, key))
}

fn parse(files: &TlsFiles, (cert, key): &Contents) -> Result<Pair, LoadError> {
    Pair::from_pem(cert, key).map_err(|e| match e {
        PairError::Cert(reason) => LoadError::Cert {
            path: files.cert.display().to_string(),
            reason,
        },
        PairError::Key(reason) => LoadError::Key {
            path: files.key.display().to_string(),
            reason,
        },
        PairError::Mismatch => LoadError::Mismatch {
            cert: files.cert.display().to_string(),
            key: files.key.display().to_string(),
        },
    })
}

/// Loads the pair as the listener serves it.
pub(crate) fn load(files: &TlsFiles) -> Result<Pair, LoadError> {
    parse(files, &read(files)?)
}

/// Watches the configured pairs; slot `i` is pair `i`.
pub(crate) struct Reloader {
    store: Arc<CertStore>,
    pairs: Vec<TlsFiles>,
    /// What `load_all` put in the slots: the watch compares against it, so a pair rotated
    /// between the first load and the watch's start is still seen as a change.
    loaded: std::sync::Mutex<Vec<Option<Contents>>>,
}

impl Reloader {
    pub(crate) fn new(store: Arc<CertStore>, pairs: Vec<TlsFiles>) -> Self {
        let loaded = std::sync::Mutex::new(pairs.iter().map(|_| None).collect());
        Self {
            store,
            pairs,
            loaded,
        }
    }

    /// Loads every pair into its slot; the first start fails on a bad one (preflight has
    /// checked them, so this is a race with an edit).
    pub(crate) fn load_all(&self) -> Result<Vec<Contents>, LoadError> {
        let mut seen = Vec::with_capacity(self.pairs.len());
        for (slot, files) in self.pairs.iter().enumerate() {
            let contents = read(files)?;
            self.store.set(slot, parse(files, &contents)?);
            seen.push(contents);
        }
        *self.loaded.lock().unwrap_or_else(|p| p.into_inner()) =
            seen.iter().cloned().map(Some).collect();
        Ok(seen)
    }

    /// What the watch compares against at its start: what `load_all` loaded, not what is on
    /// disk now — the files may have changed since (the service can start well after the
    /// listener).
    fn watch_from(&self) -> Vec<Option<Contents>> {
        let mut seen = std::mem::take(&mut *self.loaded.lock().unwrap_or_else(|p| p.into_inner()));
        seen.resize_with(self.pairs.len(), || None);
        seen
    }

    /// One look at every pair: a changed one is loaded, or logged and kept out.
    fn check(&self, seen: &mut [Option<Contents>], why: &str) {
        for (slot, files) in self.pairs.iter().enumerate() {
            let contents = match read(files) {
                Ok(c) => c,
                Err(e) => {
                    tracing::debug!(error = %e, "tls pair not readable right now");
                    continue;
                }
            };
            if seen.get(slot).and_then(Option::as_ref) == Some(&contents) {
                continue;
            }
            match parse(files, &contents) {
                Ok(pair) => {
                    tracing::info!(
                        cert = %files.cert.display(),
                        name = pair.label(),
                        not_after = pair.not_after,
                        trigger = why,
                        "tls certificate reloaded"
                    );
                    self.store.set(slot as Slot, pair);
                }
                Err(e) => {
                    self.store.metrics().reload_failures.inc();
                    tracing::warn!(
                        error = %e,
                        trigger = why,
                        "tls certificate changed but does not load; the previous one stays served"
                    );
                }
            }
            if let Some(place) = seen.get_mut(slot) {
                *place = Some(contents);
            }
        }
    }
}

#[async_trait]
impl BackgroundService for Reloader {
    async fn start(&self, mut shutdown: ShutdownWatch) {
        use tokio::signal::unix::{SignalKind, signal};
        let mut seen = self.watch_from();
        let mut hup = signal(SignalKind::hangup()).ok();
        let mut tick = tokio::time::interval(POLL);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            let why = tokio::select! {
                _ = shutdown.changed() => return,
                _ = tick.tick() => "changed on disk",
                Some(()) = async {
                    match hup.as_mut() {
                        Some(h) => h.recv().await,
                        None => std::future::pending().await,
                    }
                } => "SIGHUP",
            };
            self.check(&mut seen, why);
        }
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use crate::metrics::TlsMetrics;

    fn write_pair(files: &TlsFiles, name: &str) {
        let c = rcgen::generate_simple_self_signed(vec![name.to_owned()]).unwrap();
        std::fs::write(&files.cert, c.cert.pem()).unwrap();
        std::fs::write(&files.key, c.signing_key.serialize_pem()).unwrap();
    }

    #[test]
    fn a_changed_pair_is_served_and_a_broken_one_keeps_the_previous() {
        let dir = tempfile::tempdir().unwrap();
        let files = TlsFiles {
            cert: dir.path().join("c.pem"),
            key: dir.path().join("k.pem"),
        };
        write_pair(&files, "one.example");
        let metrics = TlsMetrics::default();
        let store = CertStore::new(1, None, metrics.clone());
        let reloader = Reloader::new(store.clone(), vec![files.clone()]);
        let mut seen: Vec<Option<Contents>> =
            reloader.load_all().unwrap().into_iter().map(Some).collect();
        assert_eq!(store.get(0).unwrap().label(), "one.example");

        // A key of another certificate: the old pair stays, the failure counts once.
        let other = rcgen::generate_simple_self_signed(vec!["x".to_owned()]).unwrap();
        std::fs::write(&files.key, other.signing_key.serialize_pem()).unwrap();
        reloader.check(&mut seen, "test");
        reloader.check(&mut seen, "test");
        assert_eq!(store.get(0).unwrap().label(), "one.example");
        assert_eq!(metrics.reload_failures.get(), 1);

        write_pair(&files, "two.example");
        reloader.check(&mut seen, "test");
        assert_eq!(store.get(0).unwrap().label(), "two.example");
    }

    /// The watch starts later than the first load (a background service); a pair rotated in
    /// between is a change all the same.
    #[test]
    fn a_pair_rotated_before_the_watch_starts_is_still_loaded() {
        let dir = tempfile::tempdir().unwrap();
        let files = TlsFiles {
            cert: dir.path().join("c.pem"),
            key: dir.path().join("k.pem"),
        };
        write_pair(&files, "one.example");
        let store = CertStore::new(1, None, TlsMetrics::default());
        let reloader = Reloader::new(store.clone(), vec![files.clone()]);
        reloader.load_all().unwrap();
        write_pair(&files, "two.example");
        let mut seen = reloader.watch_from();
        reloader.check(&mut seen, "test");
        assert_eq!(store.get(0).unwrap().label(), "two.example");
    }

    #[test]
    fn load_errors_name_the_file() {
        let dir = tempfile::tempdir().unwrap();
        let files = TlsFiles {
            cert: dir.path().join("c.pem"),
            key: dir.path().join("k.pem"),
        };
        let e = load(&files).unwrap_err().to_string();
        assert!(e.starts_with("tls.cert "), "{e}");
        std::fs::write(&files.cert, "not pem").unwrap();
        std::fs::write(&files.key, "not pem").unwrap();
        let e = load(&files).unwrap_err().to_string();
        assert!(e.starts_with("tls.cert "), "{e}");
    }
}
