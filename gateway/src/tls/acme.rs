//! The ACME client (RFC 8555 with the `instant-acme` crate): obtains the certificate for
//! `[tls.acme] domains` at start and renews it at two thirds of its lifetime, answering the
//! CA's tls-alpn-01 probe on the TLS listener itself (through the certificate store) or
//! http-01 on a plain listener ([`http01`]). A failed order is logged with the CA's problem
//! document, counted (`pforte_tls_renewal_failures`) and retried with exponential backoff; the
//! certificate served until then stays. With redis several gateways share the account, the
//! certificate and one order at a time (a lock with expiry); the others answer the
//! challenges the holder publishes and take the certificate it stores.

mod client;
mod http01;
mod state;

use std::{collections::BTreeMap, sync::Arc, time::Duration};

use async_trait::async_trait;
use instant_acme::{
    Account, AccountCredentials, AuthorizationStatus, ChallengeType, Identifier, NewAccount,
    NewOrder, OrderStatus, Problem, RetryPolicy,
};
use pforte_clock::Clock;
use pingora::{server::ShutdownWatch, services::background::BackgroundService};
use rustls::sign::CertifiedKey;
use serde::{Deserialize, Serialize};

pub(crate) use http01::{Http01, HttpTokens};
pub(crate) use state::{State, StateError};

use super::{
    pair::Pair,
    store::{CertStore, Slot},
};
use crate::config::{Acme, AcmeChallenge};

/// The first retry after a failed order; each further failure doubles it, up to [`MAX_BACKOFF`].
const FIRST_BACKOFF: Duration = Duration::from_secs(5);
const MAX_BACKOFF: Duration = Duration::from_secs(3600);
/// How often a gateway waiting on another one's order looks for its challenges and certificate.
const FOLLOW_POLL: Duration = Duration::from_millis(200);
/// With shared state, how long the order holder gives the other gateways to pick up a
/// published challenge before telling the CA to validate (the CA may connect to any of them).
const PUBLISH_GRACE: Duration = Duration::from_millis(3 * 200);
/// The longest sleep between two looks at the stored certificate (shared state: another
/// gateway may have renewed it).
const MAX_SLEEP: Duration = Duration::from_secs(3600);
/// An order lock expires after this, should its holder die.
const LOCK_TTL: Duration = Duration::from_secs(300);
/// How long the CA may take to validate and to issue.
const CA_PATIENCE: Duration = Duration::from_secs(120);

#[derive(Debug, thiserror::Error)]
pub(crate) enum AcmeError {
    #[error("the CA answered: {}", describe(.0))]
    Problem(Problem),
    #[error("{0}")]
    Client(instant_acme::Error),
    #[error("the CA offers no {0} challenge for {1}")]
    NoChallenge(&'static str, String),
    #[error("authorization for {0} is {1}")]
    Authorization(String, String),
    #[error("order ended {0}")]
    Order(String),
    #[error("generating a key or request: {0}")]
    Generate(#[from] rcgen::Error),
    #[error("the issued certificate does not load: {0}")]
    Issued(#[from] super::PairError),
    #[error("state: {0}")]
    State(#[from] state::StateError),
    #[error("stored account: {0}")]
    Json(#[from] serde_json::Error),
}

impl From<instant_acme::Error> for AcmeError {
    fn from(e: instant_acme::Error) -> Self {
        match e {
            instant_acme::Error::Api(p) => Self::Problem(p),
            other => Self::Client(other),
        }
    }
}

/// A problem document in one line: type, status, detail and each subproblem.
fn describe(p: &Problem) -> String {
    let mut text = format!(
        "{} (status {}): {}",
        p.r#type.as_deref().unwrap_or("about:blank"),
        p.status.map_or("-".to_owned(), |s| s.to_string()),
        p.detail.as_deref().unwrap_or("")
    );
    for sub in &p.subproblems {
        text.push_str(&format!(
            "; {}: {}",
            sub.r#type.as_deref().unwrap_or("?"),
            sub.detail.as_deref().unwrap_or("")
        ));
    }
    text
}

/// The stored certificate.
#[derive(Debug, Serialize, Deserialize)]
struct StoredCert {
    cert: String,
    key: String,
}

/// Challenge answers published for the other gateways on the same redis.
#[derive(Debug, Default, Serialize, Deserialize)]
struct Published {
    /// tls-alpn-01: domain → SHA-256 of the key authorization, hex.
    tls: BTreeMap<String, String>,
    /// http-01: token → key authorization.
    http: BTreeMap<String, String>,
}

/// When a certificate is due for renewal: two thirds into its lifetime.
pub(crate) fn renew_at(not_before: i64, not_after: i64) -> i64 {
    not_before + (not_after - not_before).max(0) * 2 / 3
}

/// The wait after `failures` failed orders in a row.
pub(crate) fn backoff(failures: u32) -> Duration {
    let exp = failures.saturating_sub(1).min(20);
    FIRST_BACKOFF.saturating_mul(1 << exp).min(MAX_BACKOFF)
}

/// The tls-alpn-01 answer for `domain` (RFC 8737): a self-signed certificate naming it with
/// the critical acmeIdentifier extension holding the key authorization's digest. (Not through
/// [`Pair`]: its key check parses the certificate with webpki, which refuses the critical
/// extension it does not know — rightly for a served certificate, not for this probe answer.)
pub(crate) fn alpn_certificate(
    domain: &str,
    digest: &[u8],
) -> Result<Arc<CertifiedKey>, AcmeError> {
    use rustls::pki_types::{PrivateKeyDer, PrivatePkcs8KeyDer};
    let key = rcgen::KeyPair::generate()?;
    let mut params = rcgen::CertificateParams::new(vec![domain.to_owned()])?;
    params.custom_extensions = vec![rcgen::CustomExtension::new_acme_identifier(digest)];
    let cert = params.self_signed(&key)?;
    let der = PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(key.serialize_der()));
    let signing = rustls::crypto::ring::default_provider()
        .key_provider
        .load_private_key(der)
        .map_err(|e| AcmeError::Issued(super::PairError::Key(e.to_string())))?;
    Ok(Arc::new(CertifiedKey::new(
        vec![cert.der().clone()],
        signing,
    )))
}

/// The ACME client as a background service filling `slot` of the store.
pub(crate) struct AcmeService {
    cfg: Acme,
    store: Arc<CertStore>,
    slot: Slot,
    state: State,
    tokens: HttpTokens,
    clock: Arc<dyn Clock>,
    /// Names of this configuration's entries: `account-…`, `cert-…`, `challenges-…`.
    id: String,
    account_id: String,
}

impl AcmeService {
    pub(crate) fn new(
        cfg: Acme,
        store: Arc<CertStore>,
        slot: Slot,
        state: State,
        tokens: HttpTokens,
        clock: Arc<dyn Clock>,
    ) -> Self {
        use sha2::Digest as _;
        let short = |text: &str| hex::encode(&sha2::Sha256::digest(text.as_bytes())[..6]);
        let first = cfg.domains.first().cloned().unwrap_or_default();
        let id = format!(
            "{}-{}",
            first.replace('*', "_"),
            short(&format!("{}|{}", cfg.directory, cfg.domains.join(",")))
        );
        let account_id = format!("account-{}.json", short(&cfg.directory));
        Self {
            cfg,
            store,
            slot,
            state,
            tokens,
            clock,
            id,
            account_id,
        }
    }

    /// The stored certificate, when it loads and covers every domain.
    async fn stored(&self, state: &State) -> Result<Option<Pair>, AcmeError> {
        let Some(text) = state.get(&format!("cert-{}.json", self.id)).await? else {
            return Ok(None);
        };
        let stored: StoredCert = serde_json::from_str(&text)?;
        let pair = Pair::from_pem(stored.cert.as_bytes(), stored.key.as_bytes())?;
        Ok(self
            .cfg
            .domains
            .iter()
            .all(|d| pair.covers(d))
            .then_some(pair))
    }

    /// Installs the stored certificate when it is newer than the served one.
    async fn take_stored(&self, state: &State) {
        match self.stored(state).await {
            Ok(Some(pair)) => {
                let newer = self
                    .store
                    .get(self.slot)
                    .is_none_or(|cur| pair.not_after > cur.not_after);
                if newer {
                    tracing::info!(
                        name = pair.label(),
                        not_after = pair.not_after,
                        "acme certificate loaded from the state"
                    );
                    self.store.set(self.slot, pair);
                }
            }
            Ok(None) => {}
            Err(e) => tracing::warn!(error = %e, "acme: the stored certificate is unusable"),
        }
    }

    async fn account(&self, state: &State) -> Result<Account, AcmeError> {
        let builder = || -> Result<_, AcmeError> {
            let http = client::AcmeHttp::new(self.cfg.ca_file.as_deref())
                .map_err(|e| AcmeError::Client(instant_acme::Error::Other(Box::new(e))))?;
            Ok(Account::builder_with_http(Box::new(http)))
        };
        if let Some(json) = state.get(&self.account_id).await? {
            let creds: AccountCredentials = serde_json::from_str(&json)?;
            return Ok(builder()?.from_credentials(creds).await?);
        }
        let contact = self.cfg.email.as_ref().map(|e| format!("mailto:{e}"));
        let contacts: Vec<&str> = contact.iter().map(String::as_str).collect();
        let (account, creds) = builder()?
            .create(
                &NewAccount {
                    contact: &contacts,
                    terms_of_service_agreed: true,
                    only_return_existing: false,
                },
                self.cfg.directory.clone(),
                None,
            )
            .await?;
        state
            .put(&self.account_id, &serde_json::to_string(&creds)?)
            .await?;
        tracing::info!(directory = %self.cfg.directory, "acme account created");
        Ok(account)
    }

    /// One order, start to certificate; the challenges are withdrawn whatever happens.
    async fn order(&self, state: &State) -> Result<Pair, AcmeError> {
        let mut published = Published::default();
        let result = self.order_inner(state, &mut published).await;
        for domain in published.tls.keys() {
            self.store.clear_challenge(domain);
        }
        if let Ok(mut tokens) = self.tokens.write() {
            for token in published.http.keys() {
                tokens.remove(token);
            }
        }
        if state.shared() {
            let _ = state.remove(&format!("challenges-{}.json", self.id)).await;
        }
        result
    }

    async fn order_inner(
        &self,
        state: &State,
        published: &mut Published,
    ) -> Result<Pair, AcmeError> {
        let account = self.account(state).await?;
        let identifiers: Vec<Identifier> = self
            .cfg
            .domains
            .iter()
            .map(|d| Identifier::Dns(d.clone()))
            .collect();
        let mut order = account.new_order(&NewOrder::new(&identifiers)).await?;
        tracing::info!(
            domains = ?self.cfg.domains,
            challenge = self.cfg.challenge.as_str(),
            order = order.url(),
            "acme order created"
        );
        let kind = match self.cfg.challenge {
            AcmeChallenge::TlsAlpn01 => ChallengeType::TlsAlpn01,
            AcmeChallenge::Http01 => ChallengeType::Http01,
        };
        let mut authorizations = order.authorizations();
        while let Some(authz) = authorizations.next().await {
            let mut authz = authz?;
            let domain = authz.identifier().to_string();
            match authz.status {
                AuthorizationStatus::Pending => {}
                AuthorizationStatus::Valid => continue,
                other => return Err(AcmeError::Authorization(domain, format!("{other:?}"))),
            }
            let mut challenge = authz.challenge(kind.clone()).ok_or_else(|| {
                AcmeError::NoChallenge(self.cfg.challenge.as_str(), domain.clone())
            })?;
            let key_auth = challenge.key_authorization();
            match self.cfg.challenge {
                AcmeChallenge::TlsAlpn01 => {
                    let digest = key_auth.digest().as_ref().to_vec();
                    self.store
                        .set_challenge(&domain, alpn_certificate(&domain, &digest)?);
                    published.tls.insert(domain, hex::encode(digest));
                }
                AcmeChallenge::Http01 => {
                    let token = challenge.token.clone();
                    if let Ok(mut tokens) = self.tokens.write() {
                        tokens.insert(token.clone(), key_auth.as_str().to_owned());
                    }
                    published.http.insert(token, key_auth.as_str().to_owned());
                }
            }
            if state.shared() {
                state
                    .put(
                        &format!("challenges-{}.json", self.id),
                        &serde_json::to_string(&published)?,
                    )
                    .await?;
                tokio::time::sleep(PUBLISH_GRACE).await;
            }
            challenge.set_ready().await?;
        }
        let patience = RetryPolicy::new().timeout(CA_PATIENCE);
        let status = order.poll_ready(&patience).await?;
        if status != OrderStatus::Ready {
            return Err(why_invalid(&mut order, status).await);
        }
        let key = rcgen::KeyPair::generate()?;
        let mut params = rcgen::CertificateParams::new(self.cfg.domains.clone())?;
        params.distinguished_name = rcgen::DistinguishedName::new();
        let csr = params.serialize_request(&key)?;
        order.finalize_csr(csr.der()).await?;
        let chain = order.poll_certificate(&patience).await?;
        let key_pem = key.serialize_pem();
        let pair = Pair::from_pem(chain.as_bytes(), key_pem.as_bytes())?;
        let stored = StoredCert {
            cert: chain,
            key: key_pem,
        };
        state
            .put(
                &format!("cert-{}.json", self.id),
                &serde_json::to_string(&stored)?,
            )
            .await?;
        Ok(pair)
    }

    /// While another gateway holds the order lock: answer the challenges it publishes.
    async fn follow(&self, state: &State) {
        let Ok(Some(text)) = state.get(&format!("challenges-{}.json", self.id)).await else {
            return;
        };
        let Ok(published) = serde_json::from_str::<Published>(&text) else {
            return;
        };
        for (domain, digest) in &published.tls {
            if let Ok(digest) = hex::decode(digest)
                && let Ok(key) = alpn_certificate(domain, &digest)
            {
                self.store.set_challenge(domain, key);
            }
        }
        if let Ok(mut tokens) = self.tokens.write() {
            for (token, answer) in published.http {
                tokens.insert(token, answer);
            }
        }
    }

    /// One turn of the loop: returns how long to sleep.
    async fn turn(&self, state: &State, failures: &mut u32) -> Duration {
        self.take_stored(state).await;
        let now = i64::try_from(self.clock.now_secs()).unwrap_or(i64::MAX);
        let due = self
            .store
            .get(self.slot)
            .map_or(now, |p| renew_at(p.not_before, p.not_after));
        if now < due {
            let left = u64::try_from(due - now).unwrap_or(0);
            return Duration::from_secs(left).min(MAX_SLEEP);
        }
        let lock = format!("order-{}", self.id);
        match state.lock(&lock, LOCK_TTL).await {
            Ok(true) => {}
            Ok(false) => {
                self.follow(state).await;
                return FOLLOW_POLL;
            }
            Err(e) => {
                tracing::warn!(error = %e, "acme: the order lock is unreachable");
                *failures += 1;
                self.store.metrics().renewal_failures.inc();
                return backoff(*failures);
            }
        }
        // Another gateway may have finished between our look and the lock.
        self.take_stored(state).await;
        let still_due = self
            .store
            .get(self.slot)
            .is_none_or(|p| now >= renew_at(p.not_before, p.not_after));
        let wait = if still_due {
            let started = std::time::Instant::now();
            match self.order(state).await {
                Ok(pair) => {
                    tracing::info!(
                        name = pair.label(),
                        not_after = pair.not_after,
                        took_ms = started.elapsed().as_millis() as u64,
                        "acme certificate obtained"
                    );
                    self.store.set(self.slot, pair);
                    self.store.metrics().renewals.inc();
                    *failures = 0;
                    Duration::ZERO
                }
                Err(e) => {
                    *failures += 1;
                    self.store.metrics().renewal_failures.inc();
                    let wait = backoff(*failures);
                    tracing::warn!(
                        error = %e,
                        failures = *failures,
                        retry_in_secs = wait.as_secs(),
                        serving = self.store.get(self.slot).is_some(),
                        "acme order failed; the current certificate stays served"
                    );
                    wait
                }
            }
        } else {
            Duration::ZERO
        };
        if let Err(e) = state.unlock(&lock).await {
            tracing::warn!(error = %e, "acme: releasing the order lock");
        }
        wait
    }
}

/// Why an order did not become ready: the order's problem, or a challenge's.
async fn why_invalid(order: &mut instant_acme::Order, status: OrderStatus) -> AcmeError {
    if let Some(problem) = order.state().error.clone() {
        return AcmeError::Problem(problem);
    }
    let mut authorizations = order.authorizations();
    while let Some(Ok(mut authz)) = authorizations.next().await {
        if let Ok(state) = authz.refresh().await
            && let Some(problem) = state.challenges.iter().find_map(|c| c.error.clone())
        {
            return AcmeError::Problem(problem);
        }
    }
    AcmeError::Order(format!("{status:?}"))
}

#[async_trait]
impl BackgroundService for AcmeService {
    async fn start(&self, mut shutdown: ShutdownWatch) {
        let state = &self.state;
        let mut failures = 0u32;
        loop {
            let wait = self.turn(state, &mut failures).await;
            tokio::select! {
                _ = shutdown.changed() => return,
                () = tokio::time::sleep(wait) => {}
            }
        }
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn renewal_is_due_two_thirds_into_the_lifetime() {
        assert_eq!(renew_at(0, 90 * 86_400), 60 * 86_400);
        assert_eq!(renew_at(1_000, 1_030), 1_020);
        assert_eq!(renew_at(10, 5), 10);
    }

    #[test]
    fn backoff_doubles_from_five_seconds_up_to_an_hour() {
        assert_eq!(backoff(1), Duration::from_secs(5));
        assert_eq!(backoff(2), Duration::from_secs(10));
        assert_eq!(backoff(4), Duration::from_secs(40));
        assert_eq!(backoff(40), MAX_BACKOFF);
    }

    #[test]
    fn the_alpn_certificate_names_the_domain_and_carries_the_digest() {
        use x509_parser::prelude::{FromDer as _, X509Certificate};
        let key = alpn_certificate("mcp.example.com", &[7u8; 32]).unwrap();
        let (_, cert) = X509Certificate::from_der(key.cert[0].as_ref()).unwrap();
        let ext = cert
            .extensions()
            .iter()
            .find(|e| e.oid.to_id_string() == "1.3.6.1.5.5.7.1.31")
            .unwrap();
        assert!(ext.critical);
        // DER OCTET STRING of 32 bytes.
        assert_eq!(&ext.value[..2], &[0x04, 0x20]);
        assert_eq!(&ext.value[2..], &[7u8; 32]);
    }

    #[test]
    fn a_problem_document_is_one_line() {
        let p: Problem = serde_json::from_str(
            r#"{"type":"urn:ietf:params:acme:error:connection","detail":"refused","status":400,
                "subproblems":[{"type":"urn:ietf:params:acme:error:dns","detail":"no A"}]}"#,
        )
        .unwrap();
        assert_eq!(
            describe(&p),
            "urn:ietf:params:acme:error:connection (status 400): refused; \
             urn:ietf:params:acme:error:dns: no A"
        );
    }
}
