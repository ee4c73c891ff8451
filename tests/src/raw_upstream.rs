//! An upstream that answers in raw bytes: a TCP server on 127.0.0.1 that reads each request's
//! head (and its `Content-Length` body), answers with the bytes a test gives for that request,
//! and keeps every byte it received on the connection, after the answer too — so a test can
//! send what a hostile or broken upstream would and see what got past the gateway. Stopped
//! when dropped, its open connections closed.

use std::sync::{Arc, Mutex};

use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};

/// The answer's bytes for a request, given its head as text.
type Answer = dyn Fn(&str) -> Vec<u8> + Send + Sync;

/// The most kept of what one connection sent.
const KEEP: usize = 1024 * 1024;

#[derive(Debug)]
pub struct RawUpstream {
    pub addr: std::net::SocketAddr,
    received: Arc<Mutex<Vec<Vec<u8>>>>,
    task: tokio::task::JoinHandle<()>,
    /// The connections being served: closed when the upstream is dropped.
    connections: Arc<Mutex<Vec<tokio::task::AbortHandle>>>,
}

impl RawUpstream {
    /// Answers every request with `answer(head)`, then goes on reading the connection.
    pub async fn start(answer: impl Fn(&str) -> Vec<u8> + Send + Sync + 'static) -> Self {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind 127.0.0.1");
        let addr = listener.local_addr().expect("local addr");
        let received = Arc::new(Mutex::new(Vec::new()));
        let kept = Arc::clone(&received);
        let answer: Arc<Answer> = Arc::new(answer);
        let connections = Arc::new(Mutex::new(Vec::new()));
        let served = Arc::clone(&connections);
        let task = tokio::spawn(async move {
            while let Ok((conn, _)) = listener.accept().await {
                let kept = Arc::clone(&kept);
                let answer = Arc::clone(&answer);
                let handle = tokio::spawn(serve(conn, kept, answer)).abort_handle();
                if let Ok(mut served) = served.lock() {
                    served.push(handle);
                }
            }
        });
        Self {
            addr,
            received,
            task,
            connections,
        }
    }

    /// Its MCP URL.
    pub fn mcp_url(&self) -> String {
        format!("http://{}/mcp", self.addr)
    }

    /// Everything received so far, per connection.
    pub fn received(&self) -> Vec<String> {
        self.received
            .lock()
            .map(|r| {
                r.iter()
                    .map(|c| String::from_utf8_lossy(c).into_owned())
                    .collect()
            })
            .unwrap_or_default()
    }

    /// Closes every connection it serves (as an upstream whose keep-alive timeout ran out),
    /// and goes on accepting new ones.
    pub fn close_connections(&self) {
        if let Ok(mut connections) = self.connections.lock() {
            connections.drain(..).for_each(|c| c.abort());
        }
    }

    /// Whether any connection carried `needle`.
    pub fn saw(&self, needle: &str) -> bool {
        self.received().iter().any(|c| c.contains(needle))
    }
}

impl Drop for RawUpstream {
    fn drop(&mut self) {
        self.task.abort();
        if let Ok(connections) = self.connections.lock() {
            connections.iter().for_each(tokio::task::AbortHandle::abort);
        }
    }
}

/// One connection: each request answered, every byte kept (bounded).
async fn serve(
    mut conn: tokio::net::TcpStream,
    kept: Arc<Mutex<Vec<Vec<u8>>>>,
    answer: Arc<Answer>,
) {
    let slot = match kept.lock() {
        Ok(mut k) => {
            k.push(Vec::new());
            k.len() - 1
        }
        Err(_) => return,
    };
    let mut pending = Vec::new();
    let mut buf = [0u8; 8192];
    loop {
        let n = match conn.read(&mut buf).await {
            Ok(0) | Err(_) => return,
            Ok(n) => n,
        };
        if let Ok(mut k) = kept.lock()
            && k[slot].len() < KEEP
        {
            k[slot].extend_from_slice(&buf[..n]);
        }
        pending.extend_from_slice(&buf[..n]);
        // Each whole request (head and Content-Length body) gets its answer.
        while let Some(end) = pending.windows(4).position(|w| w == b"\r\n\r\n") {
            let head = String::from_utf8_lossy(&pending[..end]).into_owned();
            let length = head
                .lines()
                .filter_map(|l| l.split_once(':'))
                .find(|(k, _)| k.trim().eq_ignore_ascii_case("content-length"))
                .and_then(|(_, v)| v.trim().parse::<usize>().ok())
                .unwrap_or(0);
            if pending.len() < end + 4 + length {
                break;
            }
            pending.drain(..end + 4 + length);
            if conn.write_all(&answer(&head)).await.is_err() {
                return;
            }
        }
    }
}
