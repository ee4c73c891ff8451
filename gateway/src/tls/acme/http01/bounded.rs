//! The plain listener's bounds, as the main listener's: each accepted connection holds a slot
//! of its client IP (`max_connections_per_ip`, [`crate::conns`]) and lives at most
//! `keepalive_timeout_secs` in all — head, answer and idle together (an http-01 fetch or a
//! redirect takes one short request) — after which its reads and writes fail and it closes.

use std::{
    io,
    net::SocketAddr,
    pin::Pin,
    sync::Arc,
    task::{Context, Poll},
    time::Duration,
};

use tokio::{
    io::{AsyncRead, AsyncWrite, ReadBuf},
    net::{TcpListener, TcpStream},
    time::Sleep,
};

use crate::conns::{Connections, Slot};

/// A TCP listener whose connections are capped per IP and by a deadline.
pub(crate) struct Bounded {
    listener: TcpListener,
    conns: Arc<Connections>,
    lifetime: Duration,
}

impl Bounded {
    pub(crate) fn new(listener: TcpListener, conns: Arc<Connections>, lifetime: Duration) -> Self {
        Self {
            listener,
            conns,
            lifetime,
        }
    }
}

impl axum::serve::Listener for Bounded {
    type Io = Deadlined;
    type Addr = SocketAddr;

    async fn accept(&mut self) -> (Self::Io, Self::Addr) {
        loop {
            let (stream, peer) = match self.listener.accept().await {
                Ok(accepted) => accepted,
                Err(e) => {
                    // Out of descriptors and the like: wait a moment rather than spin.
                    tracing::debug!(error = %e, "acme http listener: accept failed");
                    tokio::time::sleep(Duration::from_millis(100)).await;
                    continue;
                }
            };
            let Some(slot) = self.conns.open(Some(peer.ip())) else {
                tracing::debug!(peer = %peer.ip(), "acme http connection closed: max_connections_per_ip reached");
                continue;
            };
            let io = Deadlined {
                stream,
                deadline: Box::pin(tokio::time::sleep(self.lifetime)),
                _slot: slot,
            };
            return (io, peer);
        }
    }

    fn local_addr(&self) -> io::Result<Self::Addr> {
        self.listener.local_addr()
    }
}

/// An accepted connection: its IP slot, and a deadline past which it fails.
pub(crate) struct Deadlined {
    stream: TcpStream,
    deadline: Pin<Box<Sleep>>,
    _slot: Slot,
}

impl Deadlined {
    /// `Err` once the deadline passed (and the task woken when it does).
    fn expired(&mut self, cx: &mut Context<'_>) -> io::Result<()> {
        match self.deadline.as_mut().poll(cx) {
            Poll::Ready(()) => Err(io::Error::new(
                io::ErrorKind::TimedOut,
                "acme http connection outlived keepalive_timeout_secs",
            )),
            Poll::Pending => Ok(()),
        }
    }
}

impl AsyncRead for Deadlined {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        self.expired(cx)?;
        Pin::new(&mut self.stream).poll_read(cx, buf)
    }
}

impl AsyncWrite for Deadlined {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        self.expired(cx)?;
        Pin::new(&mut self.stream).poll_write(cx, buf)
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        self.expired(cx)?;
        Pin::new(&mut self.stream).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.stream).poll_shutdown(cx)
    }
}
