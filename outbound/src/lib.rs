//! Pforte's one outbound HTTP client: every feature that makes HTTP requests (the tool catalog,
//! the upstream OAuth broker, OIDC sign-in, JWKS, client metadata documents) builds its client
//! here, so none can forget a bound. A [`Client`] follows no redirects, ignores proxy variables,
//! times out (connect, whole request, idle read), trusts the roots its caller chose
//! ([`Trust`]), and reaches only what its [`AddressPolicy`] allows — checked on the URL and on
//! every resolved address at connect time. Answers are read up to a byte cap per use
//! ([`read_capped`], the one bounded reader).

mod address;
mod resolve;

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

pub use address::{AddressPolicy, Refusal, is_public};
use url::Url;

/// Why an outbound request got no usable answer.
#[derive(Debug, thiserror::Error)]
pub enum OutboundError {
    #[error("refused by the address policy: {0}")]
    Refused(#[from] Refusal),
    #[error("answer larger than {0} bytes")]
    TooLarge(usize),
    #[error("{0}")]
    Request(String),
    #[error("{0}")]
    Http(#[from] http::Error),
    #[error("CA file {path}: {reason}")]
    Ca { path: String, reason: String },
}

impl From<reqwest::Error> for OutboundError {
    fn from(e: reqwest::Error) -> Self {
        // The resolver's refusal comes back wrapped: give it its own variant.
        let mut source: Option<&(dyn std::error::Error + 'static)> = Some(&e);
        while let Some(s) = source {
            if let Some(r) = s.downcast_ref::<Refusal>() {
                return Self::Refused(r.clone());
            }
            source = s.source();
        }
        Self::Request(chain(&e))
    }
}

/// Which certificates a client trusts.
#[derive(Debug, Clone, Default)]
pub enum Trust {
    /// The platform's roots.
    #[default]
    System,
    /// Only the certificates of a PEM bundle (`path` names it in errors).
    Only { path: String, pem: Vec<u8> },
    /// The platform's roots and those of a PEM bundle.
    SystemAnd { path: String, pem: Vec<u8> },
}

impl Trust {
    /// `Only` or `SystemAnd` for the PEM file at `path`, read now.
    pub fn read(path: &std::path::Path, with_system: bool) -> Result<Self, OutboundError> {
        let shown = path.display().to_string();
        let pem = std::fs::read(path).map_err(|e| OutboundError::Ca {
            path: shown.clone(),
            reason: e.to_string(),
        })?;
        Ok(if with_system {
            Self::SystemAnd { path: shown, pem }
        } else {
            Self::Only { path: shown, pem }
        })
    }
}

/// How a client is built: one per use.
#[derive(Debug, Clone)]
pub struct Options {
    pub policy: AddressPolicy,
    pub trust: Trust,
    /// Time to connect (TCP and TLS).
    pub connect_timeout: Duration,
    /// Time for a whole request, answer included (`None`: streams, bounded by `idle_timeout`).
    pub timeout: Option<Duration>,
    /// Longest wait for the next bytes of an answer.
    pub idle_timeout: Option<Duration>,
    /// Connect over this Unix domain socket instead (the URL then names only host and path).
    pub unix_socket: Option<PathBuf>,
}

impl Default for Options {
    fn default() -> Self {
        Self {
            policy: AddressPolicy::public_only(),
            trust: Trust::System,
            connect_timeout: Duration::from_secs(5),
            timeout: Some(Duration::from_secs(10)),
            idle_timeout: None,
            unix_socket: None,
        }
    }
}

/// An HTTP client under one [`Options`]. Cheap to clone.
#[derive(Debug, Clone)]
pub struct Client {
    http: reqwest::Client,
    policy: Arc<AddressPolicy>,
}

fn certificates(path: &str, pem: &[u8]) -> Result<Vec<reqwest::Certificate>, OutboundError> {
    let certs = reqwest::Certificate::from_pem_bundle(pem).map_err(|e| OutboundError::Ca {
        path: path.to_owned(),
        reason: chain(&e),
    })?;
    if certs.is_empty() {
        return Err(OutboundError::Ca {
            path: path.to_owned(),
            reason: "no certificate in it".into(),
        });
    }
    Ok(certs)
}

impl Client {
    pub fn new(opts: Options) -> Result<Self, OutboundError> {
        let policy = Arc::new(opts.policy);
        let mut b = reqwest::Client::builder()
            .redirect(reqwest::redirect::Policy::none())
            .no_proxy()
            .connect_timeout(opts.connect_timeout)
            .dns_resolver(Arc::new(resolve::PolicyResolver {
                policy: Arc::clone(&policy),
            }));
        if let Some(t) = opts.timeout {
            b = b.timeout(t);
        }
        if let Some(t) = opts.idle_timeout {
            b = b.read_timeout(t);
        }
        if let Some(path) = &opts.unix_socket {
            b = b.unix_socket(path.as_path());
        }
        b = match &opts.trust {
            Trust::System => b,
            Trust::Only { path, pem } => b.tls_certs_only(certificates(path, pem)?),
            Trust::SystemAnd { path, pem } => b.tls_certs_merge(certificates(path, pem)?),
        };
        Ok(Self {
            http: b.build()?,
            policy,
        })
    }

    /// The policy this client's requests are held to.
    pub fn policy(&self) -> &AddressPolicy {
        &self.policy
    }

    /// A request to `url`, once the policy allows it (headers, body and a per-request timeout
    /// are the caller's to add).
    pub fn request(
        &self,
        method: http::Method,
        url: &Url,
    ) -> Result<reqwest::RequestBuilder, OutboundError> {
        self.policy.check(url)?;
        Ok(self.http.request(method, url.clone()))
    }

    /// Sends `req` (the policy checked, no redirects followed) and reads the answer, at most
    /// `max_bytes` of it.
    pub async fn send(
        &self,
        req: http::Request<Vec<u8>>,
        max_bytes: usize,
    ) -> Result<http::Response<Vec<u8>>, OutboundError> {
        let (parts, body) = req.into_parts();
        let url = Url::parse(&parts.uri.to_string())
            .map_err(|e| Refusal::NotAUrl(parts.uri.to_string(), e.to_string()))?;
        let mut resp = self
            .request(parts.method, &url)?
            .headers(parts.headers)
            .body(body)
            .send()
            .await?;
        let mut out = http::Response::builder().status(resp.status());
        for (k, v) in resp.headers() {
            out = out.header(k, v);
        }
        let body = read_capped(&mut resp, max_bytes).await?;
        Ok(out.body(body)?)
    }
}

/// The body of `resp`, at most `max_bytes` (refused at once when its `Content-Length` says
/// more; read no further than the cap otherwise).
pub async fn read_capped(
    resp: &mut reqwest::Response,
    max_bytes: usize,
) -> Result<Vec<u8>, OutboundError> {
    if resp.content_length().is_some_and(|l| l > max_bytes as u64) {
        return Err(OutboundError::TooLarge(max_bytes));
    }
    let mut body = Vec::new();
    while let Some(chunk) = resp.chunk().await? {
        if body.len() + chunk.len() > max_bytes {
            return Err(OutboundError::TooLarge(max_bytes));
        }
        body.extend_from_slice(&chunk);
    }
    Ok(body)
}

/// An error with its sources, `: `-joined (reqwest hides the useful part in a source).
pub fn chain(e: &dyn std::error::Error) -> String {
    let mut out = e.to_string();
    let mut source = e.source();
    while let Some(s) = source {
        let text = s.to_string();
        if !out.contains(&text) {
            out.push_str(": ");
            out.push_str(&text);
        }
        source = s.source();
    }
    out
}
