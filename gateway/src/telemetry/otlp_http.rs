//! The OTLP exporter's HTTP: `opentelemetry_http::HttpClient` served by the one outbound client
//! (`pforte_outbound`): no redirects, no proxy, 5 s to connect and 10 s per export, system
//! roots, answers read up to 1 MiB. The collector is the operator's (`otlp_endpoint`): any
//! address. The batch processor exports from a thread of its own without a tokio runtime, so the
//! requests run on a one-thread runtime this module starts once, on its own thread.

use std::time::Duration;

use bytes::Bytes;
use opentelemetry_http::{HttpClient, HttpError};
use pforte_outbound::{AddressPolicy, Client, Options, OutboundError, Trust};

/// Largest collector answer read.
const MAX_ANSWER_BYTES: usize = 1024 * 1024;

/// The exporter's client: the outbound client, and the runtime its requests run on.
#[derive(Debug)]
pub(super) struct OtlpHttp {
    client: Client,
    runtime: tokio::runtime::Handle,
}

impl OtlpHttp {
    pub(super) fn new() -> Result<Self, OutboundError> {
        let client = Client::new(Options {
            policy: AddressPolicy::any(),
            trust: Trust::System,
            connect_timeout: Duration::from_secs(5),
            timeout: Some(Duration::from_secs(10)),
            idle_timeout: None,
            unix_socket: None,
        })?;
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .map_err(|e| OutboundError::Request(format!("the exporter's runtime: {e}")))?;
        let handle = runtime.handle().clone();
        // The runtime lives on its thread for the process's life (never dropped in async code).
        std::thread::Builder::new()
            .name("pforte-otlp-http".into())
            .spawn(move || runtime.block_on(std::future::pending::<()>()))
            .map_err(|e| OutboundError::Request(format!("the exporter's thread: {e}")))?;
        Ok(Self {
            client,
            runtime: handle,
        })
    }
}

#[async_trait::async_trait]
impl HttpClient for OtlpHttp {
    async fn send_bytes(
        &self,
        request: http::Request<Bytes>,
    ) -> Result<http::Response<Bytes>, HttpError> {
        let client = self.client.clone();
        let request = request.map(|b| b.to_vec());
        let answer = self
            .runtime
            .spawn(async move { client.send(request, MAX_ANSWER_BYTES).await })
            .await??;
        Ok(answer.map(Bytes::from))
    }
}
