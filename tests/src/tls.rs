//! TLS for the tests: a self-signed certificate for 127.0.0.1, a TLS front for a plain-HTTP
//! backend (an https upstream), and a reqwest client that trusts exactly one certificate.

use std::{
    net::SocketAddr,
    path::{Path, PathBuf},
    time::Duration,
};

/// A self-signed certificate for 127.0.0.1 and localhost, written as PEM files.
#[derive(Debug, Clone)]
pub struct TestCert {
    pub cert_pem: String,
    pub cert: PathBuf,
    pub key: PathBuf,
}

impl TestCert {
    /// Writes `cert.pem` and `key.pem` into `dir`.
    pub fn create(dir: &Path) -> anyhow::Result<Self> {
        let ck = rcgen::generate_simple_self_signed(vec![
            "127.0.0.1".to_owned(),
            "localhost".to_owned(),
        ])?;
        let cert = dir.join("cert.pem");
        let key = dir.join("key.pem");
        std::fs::write(&cert, ck.cert.pem())?;
        std::fs::write(&key, ck.signing_key.serialize_pem())?;
        Ok(Self {
            cert_pem: ck.cert.pem(),
            cert,
            key,
        })
    }
}

/// A TLS-terminating front on 127.0.0.1 for a plain-HTTP backend (an https upstream for the
/// gateway): TLS with `cert`, the bytes copied to `backend`. Stops accepting when dropped.
#[derive(Debug)]
pub struct TlsFront {
    pub addr: SocketAddr,
    task: tokio::task::JoinHandle<()>,
}

impl TlsFront {
    pub async fn start(cert: &TestCert, backend: SocketAddr) -> anyhow::Result<Self> {
        use rustls::pki_types::{CertificateDer, PrivateKeyDer, pem::PemObject as _};
        let certs = CertificateDer::pem_file_iter(&cert.cert)?.collect::<Result<Vec<_>, _>>()?;
        let key = PrivateKeyDer::from_pem_file(&cert.key)?;
        let provider = std::sync::Arc::new(rustls::crypto::ring::default_provider());
        let config = rustls::ServerConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()?
            .with_no_client_auth()
            .with_single_cert(certs, key)?;
        let acceptor = tokio_rustls::TlsAcceptor::from(std::sync::Arc::new(config));
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
        let addr = listener.local_addr()?;
        let task = tokio::spawn(async move {
            while let Ok((tcp, _)) = listener.accept().await {
                let acceptor = acceptor.clone();
                tokio::spawn(async move {
                    let Ok(mut tls) = acceptor.accept(tcp).await else {
                        return;
                    };
                    let Ok(mut back) = tokio::net::TcpStream::connect(backend).await else {
                        return;
                    };
                    let _ = tokio::io::copy_bidirectional(&mut tls, &mut back).await;
                });
            }
        });
        Ok(Self { addr, task })
    }
}

impl Drop for TlsFront {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// A reqwest client trusting `ca_pem` only (or the default roots for plain http).
pub fn http_client(ca_pem: Option<&str>) -> reqwest::Client {
    let mut b = reqwest::Client::builder().timeout(Duration::from_secs(30));
    if let Some(pem) = ca_pem {
        let cert = reqwest::Certificate::from_pem(pem.as_bytes()).expect("pem");
        b = b.tls_certs_only([cert]);
    }
    b.build().expect("client")
}
