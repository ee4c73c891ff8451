//! A client's HTTP/1 connection whose writes can be held and sent together: pingora's HTTP/1
//! session flushes after an answer head without a length, after every chunk and after the last
//! chunk, one system call each, even when the gateway already holds the bytes that follow. While
//! the exchange (`exchange.rs`) holds the connection — only ever while the next piece of the
//! answer is already read from the upstream, never while waiting for it — writes collect here
//! and flushes are deferred; the first flush after it lets go sends everything in one write.
//! Unheld, it is the connection's write buffer: writes collect until the next flush (so that
//! the gateway's own answers, a head and a body with a length, leave in one write too). Nothing
//! stays held across a wait: a read from the client, a shutdown or a flush after the hold sends
//! what was collected first. `runtime/http1.rs` wraps every HTTP/1 client connection.

use std::{
    io,
    pin::Pin,
    sync::{
        Arc,
        atomic::{AtomicBool, Ordering},
    },
    task::{Context, Poll, ready},
    time::Duration,
};

use async_trait::async_trait;
use pingora::protocols::{
    ALPN, GetProxyDigest, GetSocketDigest, GetTimingDigest, Peek, Shutdown, SocketDigest, Ssl,
    Stream, TimingDigest, UniqueID, UniqueIDType,
    raw_connect::ProxyDigest,
    tls::{SslDigest, TlsRef},
};
use tokio::io::{AsyncRead, AsyncWrite, AsyncWriteExt as _, ReadBuf};

/// The most collected before it is written anyway: one TLS record's worth of plaintext.
const MOST: usize = 16 * 1024;

/// A client connection with its writes batched while held.
#[derive(Debug)]
pub(crate) struct Batched {
    inner: Stream,
    /// Whether flushes are deferred (set by the exchange through the session's `&Stream`).
    held: AtomicBool,
    /// Bytes collected, and how much of them was written.
    collected: Vec<u8>,
    written: usize,
    /// A flush was deferred: the next flush or read must reach the connection.
    deferred: bool,
}

impl Batched {
    /// `stream` with its writes batched while held.
    pub(crate) fn wrap(stream: Stream) -> Stream {
        Box::new(Self {
            inner: stream,
            held: AtomicBool::new(false),
            collected: Vec::new(),
            written: 0,
            deferred: false,
        })
    }

    /// Holds (`true`) or lets go of the writes of `stream`, when it is a batched one: while held,
    /// what is written is collected and flushes wait for the hold to end.
    pub(crate) fn hold(stream: Option<&Stream>, held: bool) {
        if let Some(batched) = stream.and_then(|s| s.as_any().downcast_ref::<Self>()) {
            batched.held.store(held, Ordering::Relaxed);
        }
    }

    fn is_held(&self) -> bool {
        self.held.load(Ordering::Relaxed)
    }

    /// Writes what was collected; ready once all of it is written.
    fn poll_drain(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        while self.written < self.collected.len() {
            let n =
                ready!(Pin::new(&mut self.inner).poll_write(cx, &self.collected[self.written..]))?;
            if n == 0 {
                return Poll::Ready(Err(io::ErrorKind::WriteZero.into()));
            }
            self.written += n;
        }
        self.written = 0;
        // Given back: an idle kept-alive connection or an open event stream holds nothing here.
        self.collected = Vec::new();
        Poll::Ready(Ok(()))
    }

    /// Writes what was collected and flushes, when anything was collected or deferred.
    fn poll_send(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        if self.collected.is_empty() && !self.deferred {
            return Poll::Ready(Ok(()));
        }
        ready!(self.poll_drain(cx))?;
        ready!(Pin::new(&mut self.inner).poll_flush(cx))?;
        self.deferred = false;
        Poll::Ready(Ok(()))
    }

    /// Whether `len` more bytes are collected rather than written: up to [`MOST`] until the
    /// next flush that reaches the connection, as a write buffer would (pingora writes a head
    /// and a body with a length separately, and flushes after the last of them).
    fn collects(&self, len: usize) -> bool {
        self.collected.len() + len <= MOST
    }
}

impl AsyncRead for Batched {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        // Waiting for the client: nothing of the answer may wait with it.
        ready!(self.poll_send(cx))?;
        Pin::new(&mut self.inner).poll_read(cx, buf)
    }
}

impl AsyncWrite for Batched {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        if self.collects(buf.len()) {
            self.collected.extend_from_slice(buf);
            return Poll::Ready(Ok(buf.len()));
        }
        ready!(self.poll_drain(cx))?;
        Pin::new(&mut self.inner).poll_write(cx, buf)
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        let len = bufs.iter().map(|b| b.len()).sum();
        if self.collects(len) {
            for b in bufs {
                self.collected.extend_from_slice(b);
            }
            return Poll::Ready(Ok(len));
        }
        ready!(self.poll_drain(cx))?;
        Pin::new(&mut self.inner).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        if self.is_held() {
            self.deferred = true;
            return Poll::Ready(Ok(()));
        }
        ready!(self.poll_drain(cx))?;
        ready!(Pin::new(&mut self.inner).poll_flush(cx))?;
        self.deferred = false;
        Poll::Ready(Ok(()))
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        ready!(self.poll_drain(cx))?;
        Pin::new(&mut self.inner).poll_shutdown(cx)
    }
}

#[async_trait]
impl Shutdown for Batched {
    async fn shutdown(&mut self) {
        self.held.store(false, Ordering::Relaxed);
        let _ = self.flush().await;
        Shutdown::shutdown(&mut *self.inner).await;
    }
}

impl UniqueID for Batched {
    fn id(&self) -> UniqueIDType {
        self.inner.id()
    }
}

impl Ssl for Batched {
    fn get_ssl(&self) -> Option<&TlsRef> {
        self.inner.get_ssl()
    }

    fn get_ssl_digest(&self) -> Option<Arc<SslDigest>> {
        self.inner.get_ssl_digest()
    }

    fn selected_alpn_proto(&self) -> Option<ALPN> {
        self.inner.selected_alpn_proto()
    }
}

impl GetTimingDigest for Batched {
    fn get_timing_digest(&self) -> Vec<Option<TimingDigest>> {
        self.inner.get_timing_digest()
    }

    fn get_read_pending_time(&self) -> Duration {
        self.inner.get_read_pending_time()
    }

    fn get_write_pending_time(&self) -> Duration {
        self.inner.get_write_pending_time()
    }
}

impl GetProxyDigest for Batched {
    fn get_proxy_digest(&self) -> Option<Arc<ProxyDigest>> {
        self.inner.get_proxy_digest()
    }

    fn set_proxy_digest(&mut self, digest: ProxyDigest) {
        self.inner.set_proxy_digest(digest);
    }
}

impl GetSocketDigest for Batched {
    fn get_socket_digest(&self) -> Option<Arc<SocketDigest>> {
        self.inner.get_socket_digest()
    }

    fn set_socket_digest(&mut self, digest: SocketDigest) {
        self.inner.set_socket_digest(digest);
    }
}

#[async_trait]
impl Peek for Batched {
    async fn try_peek(&mut self, buf: &mut [u8]) -> io::Result<bool> {
        self.inner.try_peek(buf).await
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use tokio::io::AsyncReadExt as _;

    /// A batched stream over one end of an in-memory pipe, and the other end.
    fn pair() -> (Stream, tokio::io::DuplexStream) {
        let (a, b) = tokio::io::duplex(64 * 1024);
        (Batched::wrap(Box::new(a)), b)
    }

    /// What the other end can read now, without waiting.
    async fn now(peer: &mut tokio::io::DuplexStream) -> Vec<u8> {
        let mut got = vec![0u8; 1024];
        match tokio::time::timeout(Duration::from_millis(20), peer.read(&mut got)).await {
            Ok(Ok(n)) => got[..n].to_vec(),
            _ => Vec::new(),
        }
    }

    #[tokio::test]
    async fn held_writes_leave_together_when_let_go() {
        let (mut s, mut peer) = pair();
        Batched::hold(Some(&s), true);
        s.write_all(b"head ").await.unwrap();
        s.flush().await.unwrap();
        s.write_all(b"chunk ").await.unwrap();
        s.flush().await.unwrap();
        assert_eq!(now(&mut peer).await, b"");
        Batched::hold(Some(&s), false);
        s.write_all(b"end").await.unwrap();
        s.flush().await.unwrap();
        assert_eq!(now(&mut peer).await, b"head chunk end");
        // Not held: until the next flush.
        s.write_all(b"next").await.unwrap();
        s.flush().await.unwrap();
        assert_eq!(now(&mut peer).await, b"next");
    }

    #[tokio::test]
    async fn unheld_writes_wait_for_the_flush_and_leave_in_one_write() {
        let (mut s, mut peer) = pair();
        s.write_all(b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\n")
            .await
            .unwrap();
        assert_eq!(now(&mut peer).await, b"");
        s.write_all(b"{}").await.unwrap();
        s.flush().await.unwrap();
        assert_eq!(
            now(&mut peer).await,
            b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\n{}"
        );
    }

    #[tokio::test]
    async fn nothing_stays_held_across_a_read_or_a_shutdown() {
        let (mut s, mut peer) = pair();
        Batched::hold(Some(&s), true);
        s.write_all(b"answer").await.unwrap();
        s.flush().await.unwrap();
        peer.write_all(b"x").await.unwrap();
        let mut one = [0u8; 1];
        s.read_exact(&mut one).await.unwrap();
        assert_eq!(now(&mut peer).await, b"answer");
        s.write_all(b"last").await.unwrap();
        Shutdown::shutdown(&mut *s).await;
        assert_eq!(now(&mut peer).await, b"last");
    }

    #[tokio::test]
    async fn a_large_answer_is_written_rather_than_collected() {
        let (mut s, mut peer) = pair();
        Batched::hold(Some(&s), true);
        let big = vec![b'x'; MOST + 1];
        s.write_all(&big).await.unwrap();
        let mut got = vec![0u8; MOST + 1];
        peer.read_exact(&mut got).await.unwrap();
        assert_eq!(got, big);
    }

    #[tokio::test]
    async fn another_stream_is_left_alone() {
        let (a, mut b) = tokio::io::duplex(1024);
        let mut plain: Stream = Box::new(a);
        Batched::hold(Some(&plain), true);
        plain.write_all(b"x").await.unwrap();
        plain.flush().await.unwrap();
        assert_eq!(now(&mut b).await, b"x");
    }
}
