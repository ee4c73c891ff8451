//! End to end, the gateway's own TLS: certificates by path reloaded while it runs and picked by
//! SNI, and certificates from a real ACME CA (pebble, with real challenge validation). One
//! module per theme; the helpers here start `pforte serve` on a config text and read which
//! certificate a handshake gets.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod acme;
mod pebble;
mod reload;
mod up_acme;

use std::{net::SocketAddr, path::Path, process::Command, sync::Arc, time::Duration};

use pforte_tests::{McpService, Proc, bin, eventually, free_port};

/// A `pforte serve` started from a config text (the caller writes `[tls]`), its stderr in
/// `gateway.log` beside the config.
pub(crate) struct Served {
    pub(crate) proc: Proc,
    pub(crate) addr: SocketAddr,
    pub(crate) dir: tempfile::TempDir,
}

impl Served {
    /// Starts the gateway on `port` with `config` (listen and data_dir are prepended) in front
    /// of `upstream`; does not wait for it.
    pub(crate) fn spawn(dir: tempfile::TempDir, port: u16, tls_toml: &str, upstream: &str) -> Self {
        Self::spawn_with(dir, port, tls_toml, upstream, &[])
    }

    pub(crate) fn spawn_with(
        dir: tempfile::TempDir,
        port: u16,
        tls_toml: &str,
        upstream: &str,
        env: &[(&str, &str)],
    ) -> Self {
        let addr: SocketAddr = format!("127.0.0.1:{port}").parse().unwrap();
        let data = dir.path().join("data");
        let config = format!(
            "listen = \"{addr}\"\ndata_dir = \"{}\"\nthreads = 2\n{tls_toml}\n[upstream]\nurl = \"{upstream}\"\n",
            data.display()
        );
        let path = dir.path().join("pforte.toml");
        std::fs::write(&path, config).unwrap();
        let mut cmd = Command::new(bin("pforte"));
        cmd.args(["serve", "--init", "--config"]).arg(&path);
        for (k, v) in env {
            cmd.env(k, v);
        }
        let proc = Proc::spawn_logged(cmd, &dir.path().join("gateway.log")).unwrap();
        Self { proc, addr, dir }
    }

    pub(crate) fn log(&self) -> String {
        std::fs::read_to_string(self.dir.path().join("gateway.log")).unwrap_or_default()
    }
}

/// A free loopback port.
pub(crate) fn port() -> u16 {
    free_port()
}

/// mcp-service on a free port.
pub(crate) fn service() -> McpService {
    McpService::start(&[]).unwrap()
}

/// Accepts any server certificate: the tests read which one they got.
#[derive(Debug)]
struct AnyCert(Arc<rustls::crypto::CryptoProvider>);

impl rustls::client::danger::ServerCertVerifier for AnyCert {
    fn verify_server_cert(
        &self,
        _: &rustls::pki_types::CertificateDer<'_>,
        _: &[rustls::pki_types::CertificateDer<'_>],
        _: &rustls::pki_types::ServerName<'_>,
        _: &[u8],
        _: rustls::pki_types::UnixTime,
    ) -> Result<rustls::client::danger::ServerCertVerified, rustls::Error> {
        Ok(rustls::client::danger::ServerCertVerified::assertion())
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &rustls::pki_types::CertificateDer<'_>,
        dss: &rustls::DigitallySignedStruct,
    ) -> Result<rustls::client::danger::HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls12_signature(
            message,
            cert,
            dss,
            &self.0.signature_verification_algorithms,
        )
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &rustls::pki_types::CertificateDer<'_>,
        dss: &rustls::DigitallySignedStruct,
    ) -> Result<rustls::client::danger::HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls13_signature(
            message,
            cert,
            dss,
            &self.0.signature_verification_algorithms,
        )
    }

    fn supported_verify_schemes(&self) -> Vec<rustls::SignatureScheme> {
        self.0.signature_verification_algorithms.supported_schemes()
    }
}

/// A TLS connection to `addr` naming `sni`, offering `alpn`; any certificate accepted.
pub(crate) async fn connect(
    addr: SocketAddr,
    sni: &str,
    alpn: &[&[u8]],
) -> anyhow::Result<tokio_rustls::client::TlsStream<tokio::net::TcpStream>> {
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mut config = rustls::ClientConfig::builder_with_provider(provider.clone())
        .with_safe_default_protocol_versions()?
        .dangerous()
        .with_custom_certificate_verifier(Arc::new(AnyCert(provider)))
        .with_no_client_auth();
    config.alpn_protocols = alpn.iter().map(|p| p.to_vec()).collect();
    let connector = tokio_rustls::TlsConnector::from(Arc::new(config));
    let tcp = tokio::net::TcpStream::connect(addr).await?;
    let name = rustls::pki_types::ServerName::try_from(sni.to_owned())?;
    Ok(connector.connect(name, tcp).await?)
}

/// The leaf certificate (DER) a handshake naming `sni` gets.
pub(crate) async fn served_leaf(addr: SocketAddr, sni: &str) -> anyhow::Result<Vec<u8>> {
    let tls = connect(addr, sni, &[b"http/1.1"]).await?;
    let (_, conn) = tls.get_ref();
    let leaf = conn
        .peer_certificates()
        .and_then(|c| c.first())
        .ok_or_else(|| anyhow::anyhow!("no certificate"))?;
    Ok(leaf.as_ref().to_vec())
}

/// The DER of the first certificate in a PEM file.
pub(crate) fn leaf_of(pem_file: &Path) -> Vec<u8> {
    use rustls::pki_types::{CertificateDer, pem::PemObject as _};
    CertificateDer::pem_file_iter(pem_file)
        .unwrap()
        .next()
        .unwrap()
        .unwrap()
        .as_ref()
        .to_vec()
}

/// Polls until the handshake naming `sni` gets `leaf`, up to `limit`.
pub(crate) async fn until_served(
    addr: SocketAddr,
    sni: &str,
    leaf: &[u8],
    limit: Duration,
) -> bool {
    eventually(limit, || async move {
        served_leaf(addr, sni).await.is_ok_and(|got| got == leaf)
    })
    .await
}
