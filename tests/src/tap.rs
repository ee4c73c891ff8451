//! A wire tap between the gateway and its upstream: a TCP relay on 127.0.0.1 that keeps every
//! byte the gateway sends upstream, so a test can say what reached the upstream's wire (for a
//! refused request: nothing, not even a head) — and what came back (`answered_text`). Stopped
//! when dropped.

use std::sync::{Arc, Mutex};

use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};

/// The most the tap keeps of what was sent upstream (and of what came back).
const KEEP: usize = 64 * 1024 * 1024;

/// Bytes the tap keeps, shared by its connections.
type Kept = Arc<Mutex<Vec<u8>>>;

#[derive(Debug)]
pub struct WireTap {
    pub addr: std::net::SocketAddr,
    sent: Arc<Mutex<Vec<u8>>>,
    answered: Arc<Mutex<Vec<u8>>>,
    task: tokio::task::JoinHandle<()>,
}

impl WireTap {
    /// A tap in front of `upstream` (`host:port`).
    pub async fn start(upstream: &str) -> anyhow::Result<Self> {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
        let addr = listener.local_addr()?;
        let sent = Arc::new(Mutex::new(Vec::new()));
        let answered = Arc::new(Mutex::new(Vec::new()));
        let kept = (Arc::clone(&sent), Arc::clone(&answered));
        let upstream = upstream.to_owned();
        let task = tokio::spawn(async move {
            while let Ok((client, _)) = listener.accept().await {
                let kept = (Arc::clone(&kept.0), Arc::clone(&kept.1));
                let upstream = upstream.clone();
                tokio::spawn(async move {
                    if let Ok(server) = tokio::net::TcpStream::connect(&upstream).await {
                        relay(client, server, kept).await;
                    }
                });
            }
        });
        Ok(Self {
            addr,
            sent,
            answered,
            task,
        })
    }

    /// Its URL for an MCP route.
    pub fn mcp_url(&self) -> String {
        format!("http://{}/mcp", self.addr)
    }

    /// How many bytes went upstream so far.
    pub fn sent_len(&self) -> usize {
        self.sent.lock().map(|s| s.len()).unwrap_or_default()
    }

    /// Whether what went upstream contains `needle` (a request id, say).
    pub fn saw(&self, needle: &str) -> bool {
        let sent = self.sent.lock().map(|s| s.clone()).unwrap_or_default();
        sent.windows(needle.len()).any(|w| w == needle.as_bytes())
    }

    /// What went upstream so far, as text (invalid UTF-8 replaced).
    pub fn sent_text(&self) -> String {
        let sent = self.sent.lock().map(|s| s.clone()).unwrap_or_default();
        String::from_utf8_lossy(&sent).into_owned()
    }

    /// What came back from upstream so far, as text (invalid UTF-8 replaced).
    pub fn answered_text(&self) -> String {
        let answered = self.answered.lock().map(|s| s.clone()).unwrap_or_default();
        String::from_utf8_lossy(&answered).into_owned()
    }

    /// How many times `needle` went upstream (a call's unique argument, say).
    pub fn count(&self, needle: &str) -> usize {
        let sent = self.sent.lock().map(|s| s.clone()).unwrap_or_default();
        sent.windows(needle.len())
            .filter(|w| *w == needle.as_bytes())
            .count()
    }

    /// The request lines that went upstream, in order.
    pub fn request_lines(&self) -> Vec<String> {
        let sent = self.sent.lock().map(|s| s.clone()).unwrap_or_default();
        String::from_utf8_lossy(&sent)
            .split("\r\n")
            .filter(|l| {
                ["GET ", "POST ", "DELETE ", "PUT ", "OPTIONS "]
                    .iter()
                    .any(|m| l.starts_with(m))
                    && l.ends_with(" HTTP/1.1")
            })
            .map(str::to_owned)
            .collect()
    }
}

impl Drop for WireTap {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// Copies both ways until either side closes; what goes each way is also kept (`sent`, then
/// `answered`).
async fn relay(
    client: tokio::net::TcpStream,
    server: tokio::net::TcpStream,
    (keep, answered): (Kept, Kept),
) {
    let (mut client_read, mut client_write) = client.into_split();
    let (mut server_read, mut server_write) = server.into_split();
    let up = async move {
        let mut buf = vec![0u8; 16 * 1024];
        while let Ok(n) = client_read.read(&mut buf).await {
            if n == 0 {
                break;
            }
            if let Ok(mut kept) = keep.lock()
                && kept.len() + n <= KEEP
            {
                kept.extend_from_slice(&buf[..n]);
            }
            if server_write.write_all(&buf[..n]).await.is_err() {
                break;
            }
        }
        let _ = server_write.shutdown().await;
    };
    let down = async move {
        let mut buf = vec![0u8; 16 * 1024];
        while let Ok(n) = server_read.read(&mut buf).await {
            if n == 0 {
                break;
            }
            if let Ok(mut kept) = answered.lock()
                && kept.len() + n <= KEEP
            {
                kept.extend_from_slice(&buf[..n]);
            }
            if client_write.write_all(&buf[..n]).await.is_err() {
                break;
            }
        }
        let _ = client_write.shutdown().await;
    };
    tokio::join!(up, down);
}
