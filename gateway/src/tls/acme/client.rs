//! The ACME client's HTTP: `instant_acme`'s `HttpClient` extension point served by the one
//! outbound client (`pforte_outbound`): no redirects, no proxy, 10 s to connect and 30 s per
//! request, the directory's CA file alone when configured (else the system roots), every answer
//! read up to 1 MiB. The directory is the operator's: any address (a private ACME server too).

use std::{future::Future, pin::Pin, time::Duration};

use bytes::Bytes;
use http_body_util::BodyExt as _;
use instant_acme::{BodyWrapper, BytesResponse, HttpClient};
use pforte_outbound::{AddressPolicy, Client, Options, OutboundError, Trust};

/// Largest ACME answer read (a directory, an order, a certificate chain).
const MAX_ANSWER_BYTES: usize = 1024 * 1024;

/// `instant_acme`'s HTTP client on the outbound client.
pub(super) struct AcmeHttp(Client);

impl AcmeHttp {
    /// A client trusting `ca_file` alone, or the system roots.
    pub(super) fn new(ca_file: Option<&std::path::Path>) -> Result<Self, OutboundError> {
        let trust = match ca_file {
            Some(path) => Trust::read(path, false)?,
            None => Trust::System,
        };
        Ok(Self(Client::new(Options {
            policy: AddressPolicy::any(),
            trust,
            connect_timeout: Duration::from_secs(10),
            timeout: Some(Duration::from_secs(30)),
            idle_timeout: None,
            unix_socket: None,
        })?))
    }
}

impl HttpClient for AcmeHttp {
    fn request(
        &self,
        req: http::Request<BodyWrapper<Bytes>>,
    ) -> Pin<Box<dyn Future<Output = Result<BytesResponse, instant_acme::Error>> + Send>> {
        let client = self.0.clone();
        Box::pin(async move {
            let (parts, body) = req.into_parts();
            let body = match body.collect().await {
                Ok(collected) => collected.to_bytes(),
                Err(never) => match never {},
            };
            let answer = client
                .send(
                    http::Request::from_parts(parts, body.to_vec()),
                    MAX_ANSWER_BYTES,
                )
                .await
                .map_err(|e| instant_acme::Error::Other(Box::new(e)))?;
            Ok(BytesResponse::from(answer.map(BodyWrapper::from)))
        })
    }
}
