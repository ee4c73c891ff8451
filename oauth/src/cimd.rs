//! Client ID Metadata Documents (I/O part): fetching over https on the one outbound client
//! (`pforte_outbound`: its address policy on the URL and on every resolved address at connect
//! time, no redirects, a size and a time cap), and an in-process cache honouring Cache-Control.

use async_trait::async_trait;
use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use url::Url;

use crate::config::CimdConfig;
use crate::protocol::Client;
use crate::protocol::cimd::{self, CimdError};

/// A fetched document body and its `Cache-Control` header.
#[derive(Clone, Debug)]
pub(crate) struct FetchedDocument {
    pub body: Vec<u8>,
    pub cache_control: Option<String>,
}

/// Fetches metadata documents (replaceable in tests).
#[async_trait]
pub(crate) trait DocumentFetcher: Send + Sync + 'static {
    async fn fetch(&self, url: &Url) -> Result<FetchedDocument, CimdError>;
}

/// The real fetcher: https only; non-public addresses refused (unless allowed) on the URL and
/// on each address the name resolves to, when connecting; no redirects; size and time caps.
#[derive(Clone, Debug)]
pub(crate) struct HttpFetcher {
    cfg: CimdConfig,
}

impl HttpFetcher {
    pub(crate) fn new(cfg: CimdConfig) -> Self {
        Self { cfg }
    }

    async fn fetch_inner(&self, url: &Url) -> Result<FetchedDocument, CimdError> {
        if url.scheme() != "https" {
            return Err(CimdError::InvalidUrl);
        }
        let policy = if self.cfg.allow_private_addresses {
            pforte_outbound::AddressPolicy::any()
        } else {
            pforte_outbound::AddressPolicy::public_only()
        };
        let timeout = Duration::from_millis(self.cfg.fetch_timeout_ms);
        let client = pforte_outbound::Client::new(pforte_outbound::Options {
            policy,
            trust: pforte_outbound::Trust::System,
            connect_timeout: timeout,
            timeout: Some(timeout),
            idle_timeout: None,
            unix_socket: None,
        })
        .map_err(fetch_error)?;
        let mut resp = client
            .request(http::Method::GET, url)
            .map_err(fetch_error)?
            .header(http::header::ACCEPT, "application/json")
            .send()
            .await
            .map_err(|e| fetch_error(e.into()))?;
        if resp.status() != reqwest::StatusCode::OK {
            return Err(CimdError::Fetch(format!(
                "HTTP status {}",
                resp.status().as_u16()
            )));
        }
        let cache_control = resp
            .headers()
            .get(http::header::CACHE_CONTROL)
            .and_then(|v| v.to_str().ok())
            .map(str::to_owned);
        let body = pforte_outbound::read_capped(&mut resp, self.cfg.max_document_bytes)
            .await
            .map_err(fetch_error)?;
        Ok(FetchedDocument {
            body,
            cache_control,
        })
    }
}

/// What an outbound failure means for a document fetch.
fn fetch_error(e: pforte_outbound::OutboundError) -> CimdError {
    use pforte_outbound::{OutboundError, Refusal};
    match e {
        OutboundError::Refused(Refusal::Address { ip, .. }) => {
            CimdError::RefusedAddress(ip.to_string())
        }
        OutboundError::Refused(r) => CimdError::RefusedAddress(r.to_string()),
        OutboundError::TooLarge(max) => CimdError::TooLarge(max),
        other => CimdError::Fetch(other.to_string()),
    }
}

#[async_trait]
impl DocumentFetcher for HttpFetcher {
    async fn fetch(&self, url: &Url) -> Result<FetchedDocument, CimdError> {
        let overall = Duration::from_millis(self.cfg.fetch_timeout_ms);
        tokio::time::timeout(overall, self.fetch_inner(url))
            .await
            .map_err(|_| CimdError::Fetch("timed out".into()))?
    }
}

const MAX_CACHED: usize = 1024;

/// A cached outcome: the valid client, or why fetching or validating it failed.
type Cached = (Result<Client, CimdError>, u64);

/// Resolves metadata-document clients, caching valid documents per their cache headers and
/// failures for `failure_cache_secs` (so repeating a bad `client_id` does not fetch again).
pub(crate) struct CimdResolver {
    fetcher: Arc<dyn DocumentFetcher>,
    cfg: CimdConfig,
    /// What a document's `grant_types` may list (the metadata's `grant_types_supported`).
    grant_types: Vec<&'static str>,
    cache: Mutex<HashMap<String, Cached>>,
}

impl CimdResolver {
    pub(crate) fn new(
        fetcher: Arc<dyn DocumentFetcher>,
        cfg: CimdConfig,
        grant_types: Vec<&'static str>,
    ) -> Self {
        Self {
            fetcher,
            cfg,
            grant_types,
            cache: Mutex::new(HashMap::new()),
        }
    }

    /// The cached outcome for `client_id`, if one is still fresh (no fetch).
    pub(crate) fn cached(&self, client_id: &str, now_ms: u64) -> Option<Result<Client, CimdError>> {
        let cache = self.cache.lock().ok()?;
        let (outcome, until) = cache.get(client_id)?;
        (*until > now_ms).then(|| outcome.clone())
    }

    /// The client described by the document at `client_id` (from the cache, else fetched).
    pub(crate) async fn resolve(&self, client_id: &str, now_ms: u64) -> Result<Client, CimdError> {
        let url = cimd::parse_client_id_url(client_id)?;
        if let Some(cached) = self.cached(client_id, now_ms) {
            return cached;
        }
        let outcome = match self.fetcher.fetch(&url).await {
            Ok(doc) => {
                cimd::validate_document(client_id, &doc.body, &self.grant_types).map(|client| {
                    (
                        client,
                        cimd::cache_lifetime(doc.cache_control.as_deref(), &self.cfg),
                    )
                })
            }
            Err(e) => Err(e),
        };
        let (outcome, secs) = match outcome {
            Ok((client, secs)) => (Ok(client), secs),
            Err(e) => {
                tracing::info!(client_id, error = %e, "client metadata document refused");
                (Err(e), self.cfg.failure_cache_secs)
            }
        };
        if secs > 0
            && let Ok(mut cache) = self.cache.lock()
        {
            if cache.len() >= MAX_CACHED {
                cache.retain(|_, (_, until)| *until > now_ms);
            }
            // Still full of fresh entries: this one is not cached (never clear them all).
            if cache.len() < MAX_CACHED || cache.contains_key(client_id) {
                cache.insert(
                    client_id.to_owned(),
                    (outcome.clone(), now_ms + secs * 1000),
                );
            }
        }
        outcome
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use super::*;
    use std::sync::atomic::{AtomicUsize, Ordering};

    struct Fake {
        doc: serde_json::Value,
        cache_control: Option<&'static str>,
        calls: AtomicUsize,
    }

    #[async_trait]
    impl DocumentFetcher for Fake {
        async fn fetch(&self, _url: &Url) -> Result<FetchedDocument, CimdError> {
            self.calls.fetch_add(1, Ordering::SeqCst);
            Ok(FetchedDocument {
                body: self.doc.to_string().into_bytes(),
                cache_control: self.cache_control.map(str::to_owned),
            })
        }
    }

    const ID: &str = "https://app.example/client.json";

    #[tokio::test]
    async fn cached_per_max_age() {
        let fake = Arc::new(Fake {
            doc: serde_json::json!({"client_id": ID, "redirect_uris": ["http://localhost/cb"]}),
            cache_control: Some("max-age=60"),
            calls: AtomicUsize::new(0),
        });
        let r = CimdResolver::new(
            fake.clone(),
            CimdConfig::default(),
            vec!["authorization_code", "refresh_token"],
        );
        r.resolve(ID, 0).await.unwrap();
        r.resolve(ID, 59_000).await.unwrap();
        assert_eq!(fake.calls.load(Ordering::SeqCst), 1);
        r.resolve(ID, 60_000).await.unwrap();
        assert_eq!(fake.calls.load(Ordering::SeqCst), 2);
    }

    struct Failing(AtomicUsize);

    #[async_trait]
    impl DocumentFetcher for Failing {
        async fn fetch(&self, _url: &Url) -> Result<FetchedDocument, CimdError> {
            self.0.fetch_add(1, Ordering::SeqCst);
            Err(CimdError::RefusedAddress("10.0.0.1".into()))
        }
    }

    #[tokio::test]
    async fn failures_are_cached_briefly_per_url() {
        let fake = Arc::new(Failing(AtomicUsize::new(0)));
        let r = CimdResolver::new(
            fake.clone(),
            CimdConfig::default(),
            vec!["authorization_code", "refresh_token"],
        );
        for t in [0, 1_000, 59_999] {
            assert!(r.resolve(ID, t).await.is_err());
        }
        assert_eq!(fake.0.load(Ordering::SeqCst), 1, "one fetch per minute");
        assert!(r.cached(ID, 30_000).is_some_and(|c| c.is_err()));
        assert!(r.resolve("https://other.example/c.json", 0).await.is_err());
        assert_eq!(fake.0.load(Ordering::SeqCst), 2, "per URL");
        assert!(r.resolve(ID, 60_000).await.is_err());
        assert_eq!(
            fake.0.load(Ordering::SeqCst),
            3,
            "fetched again after a minute"
        );
    }

    #[test]
    fn public_reasons_name_no_address() {
        for e in [
            CimdError::RefusedAddress("10.0.0.1".into()),
            CimdError::Fetch(
                "DNS: failed to lookup address information: Name or service not known".into(),
            ),
        ] {
            assert_eq!(e.public_reason(), "fetch failed");
        }
    }

    #[tokio::test]
    async fn lying_document_is_refused() {
        let fake = Arc::new(Fake {
            doc: serde_json::json!({"client_id": "https://evil.example/c.json", "redirect_uris": ["https://evil.example/cb"]}),
            cache_control: None,
            calls: AtomicUsize::new(0),
        });
        let r = CimdResolver::new(
            fake,
            CimdConfig::default(),
            vec!["authorization_code", "refresh_token"],
        );
        assert!(matches!(r.resolve(ID, 0).await, Err(CimdError::Invalid(_))));
    }

    #[tokio::test]
    async fn private_address_is_refused_before_connecting() {
        let f = HttpFetcher::new(CimdConfig::default());
        for u in [
            "https://localhost/client.json",
            "https://127.0.0.1:9/client.json",
            "https://[::1]/c.json",
            "https://10.0.0.1/c.json",
        ] {
            let err = f.fetch(&Url::parse(u).unwrap()).await.unwrap_err();
            assert!(matches!(err, CimdError::RefusedAddress(_)), "{u}: {err:?}");
        }
        let err = f
            .fetch(&Url::parse("http://app.example/c.json").unwrap())
            .await
            .unwrap_err();
        assert_eq!(err, CimdError::InvalidUrl, "https only");
    }
}
