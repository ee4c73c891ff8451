//! The TLS handshake of the public listener, done by the gateway's own `ServerApp` wrapper
//! rather than by pingora's listener: pingora's `TlsSettings` offers ALPN `h2`+`http/1.1` or
//! one custom protocol, and rustls refuses a client whose ALPN list does not overlap the
//! server's (`no_application_protocol`), so the ACME CA's tls-alpn-01 probe (ALPN
//! `acme-tls/1` only) could never be answered there. pingora's public
//! `Acceptor::from_server_config` takes a rustls `ServerConfig` built here (the certificate
//! store as its resolver, ALPN `h2`, `http/1.1` and, with tls-alpn-01, `acme-tls/1`); the
//! listener hands over the plain TCP stream and this wrapper does the handshake, then passes
//! the TLS stream to pingora's HTTP app as its own listener would have.
//!
//! Per connection this costs one downcast of pingora's boxed TCP stream (a type-id compare) and
//! one move of it out of its box (one allocation freed; pingora boxes the TLS stream either
//! way) — no extra read, peek or syscall; the handshake itself is pingora's (`tls_handshake`,
//! bounded to 60 s as pingora's listener bounds it). The connection's per-IP slot is now taken
//! before the handshake, so connections in their handshake count against
//! `max_connections_per_ip` too.
//! A connection that negotiated `acme-tls/1` is closed after the handshake (RFC 8737 §3).
//! Before the first certificate exists (ACME), a client gets the placeholder certificate and
//! one plain `503` naming why, then the connection closes.

use std::sync::Arc;

use async_trait::async_trait;
use pingora::{
    apps::ServerApp,
    listeners::tls::Acceptor,
    protocols::{ALPN, Ssl as _, Stream, l4::stream::Stream as TcpStream},
    server::ShutdownWatch,
};
use rustls::ServerConfig;
use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};

use super::store::{ACME_TLS_ALPN, CertStore};

/// The longest TLS handshake, as pingora's own listener bounds it.
const HANDSHAKE_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(60);

/// How long a client waiting for the first certificate may take to send its request head.
const WAITING_READ: std::time::Duration = std::time::Duration::from_secs(5);

/// The listener's application behind the gateway's TLS handshake (or none: a plain
/// listener passes connections straight through).
pub(crate) struct TlsEdge<A> {
    inner: Arc<A>,
    tls: Option<Handshake>,
}

/// What the handshake needs.
struct Handshake {
    store: Arc<CertStore>,
    /// h2 + http/1.1 (+ acme-tls/1): once a certificate exists.
    ready: Acceptor,
    /// http/1.1 (+ acme-tls/1): while only the placeholder exists, so the 503 is HTTP/1.1.
    waiting: Acceptor,
    /// The body of the 503 before the first certificate.
    waiting_text: String,
}

/// A rustls server configuration on `store` offering `alpn` (pingora's own choice of TLS
/// versions: 1.2 and 1.3).
fn server_config(store: &Arc<CertStore>, alpn: &[&[u8]]) -> Arc<ServerConfig> {
    let mut config = ServerConfig::builder_with_protocol_versions(&[
        &rustls::version::TLS12,
        &rustls::version::TLS13,
    ])
    .with_no_client_auth()
    .with_cert_resolver(store.clone());
    config.alpn_protocols = alpn.iter().map(|p| p.to_vec()).collect();
    Arc::new(config)
}

impl<A> TlsEdge<A> {
    /// No TLS here: the listener is plain TCP (or TLS ends in a proxy in front).
    pub(crate) fn plain(inner: A) -> Self {
        Self {
            inner: Arc::new(inner),
            tls: None,
        }
    }

    /// `acme_alpn`: offer `acme-tls/1` (tls-alpn-01 is the challenge); `waiting_text` is what
    /// a client hears before the first certificate.
    pub(crate) fn new(
        inner: A,
        store: Arc<CertStore>,
        acme_alpn: bool,
        waiting_text: String,
    ) -> Self {
        let mut ready: Vec<&[u8]> = vec![b"h2", b"http/1.1"];
        let mut waiting: Vec<&[u8]> = vec![b"http/1.1"];
        if acme_alpn {
            ready.push(ACME_TLS_ALPN);
            waiting.push(ACME_TLS_ALPN);
        }
        Self {
            inner: Arc::new(inner),
            tls: Some(Handshake {
                ready: Acceptor::from_server_config(server_config(&store, &ready)),
                waiting: Acceptor::from_server_config(server_config(&store, &waiting)),
                store,
                waiting_text,
            }),
        }
    }
}

impl Handshake {
    /// The TLS stream of an accepted connection, or `None` when there is nothing to serve: the
    /// handshake failed or timed out, it was a tls-alpn-01 validation, or no certificate exists
    /// yet (the 503 was sent).
    async fn accept(&self, stream: Stream) -> Option<Stream> {
        let tcp = match stream.into_any().downcast::<TcpStream>() {
            Ok(tcp) => *tcp,
            Err(_) => {
                tracing::error!("tls listener: not a TCP stream; connection closed");
                return None;
            }
        };
        let has_cert = self.store.has_certificate();
        let acceptor = if has_cert { &self.ready } else { &self.waiting };
        let mut tls =
            match tokio::time::timeout(HANDSHAKE_TIMEOUT, acceptor.tls_handshake(tcp)).await {
                Ok(Ok(tls)) => tls,
                Ok(Err(e)) => {
                    tracing::debug!(error = %e, "tls handshake failed");
                    return None;
                }
                Err(_) => {
                    tracing::debug!("tls handshake timed out");
                    return None;
                }
            };
        if is_acme(tls.selected_alpn_proto().as_ref()) {
            tracing::debug!("tls-alpn-01 validation handshake answered");
            let _ = tls.shutdown().await;
            return None;
        }
        if !has_cert {
            let mut head = [0u8; 4096];
            let _ = tokio::time::timeout(WAITING_READ, tls.read(&mut head)).await;
            let _ = tls
                .write_all(waiting_answer(&self.waiting_text).as_bytes())
                .await;
            let _ = tls.shutdown().await;
            return None;
        }
        Some(Box::new(tls))
    }
}

/// Whether the handshake settled on `acme-tls/1`.
fn is_acme(alpn: Option<&ALPN>) -> bool {
    matches!(alpn, Some(ALPN::Custom(c)) if c.protocol() == ACME_TLS_ALPN)
}

/// The whole answer before the first certificate.
pub(crate) fn waiting_answer(text: &str) -> String {
    format!(
        "HTTP/1.1 503 Service Unavailable\r\ncontent-type: text/plain; charset=utf-8\r\n\
         retry-after: 30\r\ncache-control: no-store\r\nconnection: close\r\n\
         content-length: {}\r\n\r\n{text}",
        text.len()
    )
}

#[async_trait]
impl<A: ServerApp + Send + Sync + 'static> ServerApp for TlsEdge<A> {
    async fn process_new(
        self: &Arc<Self>,
        stream: Stream,
        shutdown: &ShutdownWatch,
    ) -> Option<Stream> {
        let Some(hs) = &self.tls else {
            return self.inner.process_new(stream, shutdown).await;
        };
        // The handshake's state (and the waiting answer's buffer) is boxed apart: it is not
        // carried in this future for the connection's life (docs/performance.md).
        let tls = Box::pin(hs.accept(stream)).await?;
        let mut next = self.inner.process_new(tls, shutdown).await;
        while let Some(stream) = next {
            next = self.inner.process_new(stream, shutdown).await;
        }
        None
    }

    async fn cleanup(&self) {
        self.inner.cleanup().await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_acme_tls_1_counts_as_a_validation_handshake() {
        assert!(!is_acme(None));
        assert!(!is_acme(Some(&ALPN::H2)));
        assert!(!is_acme(Some(&ALPN::H1)));
        assert!(is_acme(Some(&ALPN::Custom(
            pingora::protocols::tls::CustomALPN::new(ACME_TLS_ALPN.to_vec())
        ))));
    }

    #[test]
    fn the_waiting_answer_is_a_complete_503() {
        let a = waiting_answer("no certificate yet");
        assert!(a.starts_with("HTTP/1.1 503 "));
        assert!(a.ends_with("\r\n\r\nno certificate yet"));
        assert!(a.contains("content-length: 18\r\n"));
    }
}
